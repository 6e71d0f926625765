#pragma once
// Helpers shared by the host tests of the device sparsifiers (sparsifier_logic_test.cc,
// sparsifier_decode_test.cc): CPU codecs by spec, gradient-like data, the jump table.
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/codec_spec.h"
#include "compressors/cuda/rng_logic.h"
#include "compressors/registry.h"

namespace gradpress::compressors::cuda::sparse_testing {

inline std::unique_ptr<Compressor> Make(const std::string& spec) {
  RegisterBuiltinCompressors();
  return MakeCompressor(ParseCodecShorthand(spec));
}

// Gradient-like data; with `levels`, magnitudes rounded to few values (many ties) and zeros.
inline std::vector<float> Data(int64_t n, uint32_t seed, int levels = 0) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 0.01f);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = normal(gen);
    if (levels > 0) x = std::round(x * 100.f * levels) / (100.f * levels);
  }
  return v;
}

}  // namespace gradpress::compressors::cuda::sparse_testing
