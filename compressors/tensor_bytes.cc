#include "compressors/tensor_bytes.h"

#include <cstring>

#include "common/error.h"

namespace gradpress {

std::string TensorToBytes(const torch::Tensor& t) {
  const torch::Tensor c = t.detach().to(torch::kCPU).contiguous();
  const size_t n = c.numel() * c.element_size();
  std::string out(n, '\0');
  if (n) std::memcpy(out.data(), c.data_ptr(), n);
  return out;
}

torch::Tensor BytesToTensor(std::string_view bytes, const std::vector<int64_t>& shape,
                            torch::Dtype dtype) {
  const int64_t numel = NumelOf(shape);
  const size_t elem = c10::elementSize(dtype);
  GP_ENFORCE(bytes.size() == static_cast<size_t>(numel) * elem, "tensor of shape ",
             ShapeToString(shape), " and dtype ", c10::toString(dtype), " needs ", numel * elem,
             " bytes, got ", bytes.size());
  torch::Tensor t = torch::empty(shape, torch::TensorOptions().dtype(dtype));
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

}  // namespace gradpress
