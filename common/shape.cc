#include "common/shape.h"

#include <cstring>
#include <limits>
#include <sstream>

#include "common/error.h"

namespace gradpress {

int64_t NumelOf(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    GP_ENFORCE(d >= 0, "negative dimension in shape ", ShapeToString(shape));
    GP_ENFORCE(d == 0 || n <= std::numeric_limits<int64_t>::max() / d, "shape ",
               ShapeToString(shape), " has more elements than int64 holds");
    n *= d;
  }
  return n;
}

std::string ShapeToString(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

}  // namespace gradpress
