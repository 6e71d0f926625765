#include "bench/flat_model.h"

namespace gradpress::bench {

std::vector<compressors::TensorSpec> FlatModel(int64_t numel, int keys, const std::string& prefix) {
  std::vector<compressors::TensorSpec> specs;
  for (int k = 0; k < keys; ++k) {
    const int64_t len = numel / keys + (k == keys - 1 ? numel % keys : 0);
    specs.push_back({prefix + std::to_string(k), {len}});
  }
  return specs;
}

std::vector<torch::Tensor> SplitFlat(const torch::Tensor& flat,
                                     const std::vector<compressors::TensorSpec>& specs) {
  std::vector<torch::Tensor> parts;
  int64_t off = 0;
  for (const auto& s : specs) {
    parts.push_back(flat.narrow(0, off, s.shape[0]));
    off += s.shape[0];
  }
  return parts;
}

}  // namespace gradpress::bench
