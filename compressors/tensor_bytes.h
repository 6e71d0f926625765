#pragma once
// Dense tensor <-> raw bytes (host byte order, little-endian). Worker side: links LibTorch
// (library gp_compressors_torch); the shape helpers are in common/shape.h.
//
//   std::string b = TensorToBytes(t);                 // contiguous CPU copy of t's data
//   torch::Tensor u = BytesToTensor(b, {2, 3}, torch::kFloat32);
//
// BytesToTensor checks that the byte count equals numel * element size and throws
// InvalidArgument otherwise. Shapes are validated (no negative dims, numel fits int64).
// Thread-safety: pure functions.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/shape.h"

namespace gradpress {

std::string TensorToBytes(const torch::Tensor& t);
torch::Tensor BytesToTensor(std::string_view bytes, const std::vector<int64_t>& shape,
                            torch::Dtype dtype);

}  // namespace gradpress
