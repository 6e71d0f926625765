#pragma once
// onebit: sign bits plus a scale, the 1-bit SGD / signSGD family.
//   Seide et al., "1-Bit Stochastic Gradient Descent and its Application to Data-Parallel
//   Distributed Training of Speech DNNs", Interspeech 2014 (two means, with error feedback);
//   Bernstein et al., "signSGD", ICML 2018 (sign with a scale).
//
// Per bucket: scaling mean:      a = mean |g_i|;  D(g_i) = +a if g_i >= 0 else -a
//             scaling two_means: p = mean of g_i over g_i >= 0, q = mean of |g_i| over
//                                g_i < 0;  D(g_i) = +p if g_i >= 0 else -q
// Two means keep each bucket's sum per sign, so with error feedback nothing is lost.
//
// Wire format (little-endian):
//   u8 scaling (0 = mean, 1 = two_means)    u32 bucket_size (>= 1)
//   nb = ceil(n / bucket_size) buckets x (1 or 2) f32 scales (finite, >= 0), p before q
//   n sign bits (bit_pack.h), 1 = negative
// Bytes: 5 + 4 nb (1 or 2) + ceil(n / 8). Defaults (two_means, 1024): 3.2% of fp32.
//
// Parameters: scaling (two_means | mean), bucket_size (1024).
#include "compressors/compressor.h"
#include "compressors/compressor_config.h"

namespace gradpress::compressors {

class OneBitCompressor : public Compressor {
 public:
  explicit OneBitCompressor(ParamReader& r);
  std::string Name() const override { return "onebit"; }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;

 private:
  bool two_means_;
  uint32_t bucket_;
};

}  // namespace gradpress::compressors
