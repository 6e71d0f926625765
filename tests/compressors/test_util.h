#pragma once
// Helpers shared by the compressor tests.
#include <memory>
#include <string>
#include <vector>

#include "compressors/registry.h"
#include "tests/catch_torch.h"

namespace gradpress::compressors::testing {

// A codec from a spec like "topk ratio=0.01"; `then` adds a quantizer of its values.
inline std::unique_ptr<Compressor> Make(const std::string& spec, const std::string& then = "",
                                        bool error_feedback = false) {
  RegisterBuiltinCompressors();
  CodecSpec c = ParseCodecShorthand(then.empty() ? spec : spec + " then=" + then);
  c.error_feedback = error_feedback;
  return MakeCompressor(c);
}

// Gradient-like values: N(0, 0.01^2), seeded.
inline torch::Tensor Gradient(std::vector<int64_t> shape, uint64_t seed = 7) {
  torch::manual_seed(seed);
  return torch::randn(shape) * 0.01;
}

inline size_t VarintLen(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

}  // namespace gradpress::compressors::testing
