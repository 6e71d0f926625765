#include "common/error.h"

#include <cstring>

namespace gradpress {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case ErrorCode::kNotFound:
      return "NOT_FOUND";
    case ErrorCode::kUnavailable:
      return "UNAVAILABLE";
    case ErrorCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case ErrorCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

namespace detail {
std::string WithLocation(const std::string& message, const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return message + " (" + (base ? base + 1 : file) + ":" + std::to_string(line) + ")";
}
}  // namespace detail

}  // namespace gradpress
