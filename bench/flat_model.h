#pragma once
// The benches' synthetic model (lock_bench.cc, transport_bench.cc): `keys` 1-D keys that
// split `numel` floats (the last key takes the remainder), named <prefix>0, <prefix>1, ...;
// and one flat tensor seen as those keys (views, no copy).
//
//   auto specs = FlatModel(25'000'000, 10, "layer");
//   std::vector<torch::Tensor> grads = SplitFlat(torch::randn({25'000'000}), specs);
//
// Thread-safety: pure functions.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "compressors/compressor.h"

namespace gradpress::bench {

std::vector<compressors::TensorSpec> FlatModel(int64_t numel, int keys, const std::string& prefix);
std::vector<torch::Tensor> SplitFlat(const torch::Tensor& flat,
                                     const std::vector<compressors::TensorSpec>& specs);

}  // namespace gradpress::bench
