#pragma once
// terngrad: Wen et al., "TernGrad: Ternary Gradients to Reduce Communication in Distributed
// Deep Learning", NeurIPS 2017.
//
// Per bucket (the whole tensor by default, as in the paper's layer-wise scaler):
// s = max_i |g_i|, b_i ~ Bernoulli(|g_i| / s), T(g_i) = s sign(g_i) b_i, so E[T(g)] = g.
//
// Wire format (little-endian):
//   u32 bucket_size (>= 1; the whole tensor when configured 0)
//   nb = ceil(n / bucket_size) x f32 scales s (finite, >= 0)
//   2 bits per element (bit_pack.h): 0 = 0, 1 = +s, 2 = -s (3 is invalid)
// Bytes: 4 + 4 nb + ceil(2 n / 8); ratio about 16.
//
// Parameters: bucket_size (0 = whole tensor), seed (1).
#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "compressors/rng.h"

namespace gradpress::compressors {

class TernGradCompressor : public Compressor {
 public:
  explicit TernGradCompressor(ParamReader& r);
  std::string Name() const override { return "terngrad"; }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
  void SaveState(std::string* out) const override { SaveRngState(rng_, out); }
  void LoadState(std::string_view in) override { LoadRngState(in, "terngrad", &rng_); }

 private:
  int64_t bucket_;  // 0 = whole tensor
  Rng rng_;
};

}  // namespace gradpress::compressors
