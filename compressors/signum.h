#pragma once
// signum: signSGD with momentum. Bernstein, Wang, Azizzadenesheli and Anandkumar, "signSGD:
// Compressed Optimisation for Non-Convex Problems", ICML 2018 (Signum);
// Bernstein, Zhao, Azizzadenesheli and Anandkumar, "signSGD with Majority Vote is
// Communication Efficient and Fault Tolerant", ICLR 2019.
//
// The encoder keeps a momentum m per tensor (zero at first) and sends its sign:
//   m = beta m + (1 - beta) g;   a = ||m||_1 / d = mean |m_i|;   D(g)_i = a sign(m_i)
// (sign(0) = +; a zero m decodes to zeros). The scale is our choice: the paper's update is
// lr sign(m), but gradpress workers apply the decoded tensor with the optimizer's own lr,
// so one fp32 mean |m| per tensor (per bucket_size elements) keeps the decoded tensor's L1
// norm equal to m's and the configured lr meaning what it means for dense gradients.
//
// Majority vote through the server: the server averages the W decoded tensors,
// (1/W) sum_w a_w sign(m_w); a sign pull codec (onebit scaling=mean, or signum beta=0)
// sends the sign of that average, which is the paper's majority vote weighted by each
// worker's scale a_w (exactly the majority vote when the scales are equal; a tie goes +).
//
// Wire format: onebit's (onebit.h) with scaling mean (mode byte 0; decoding refuses mode 1),
// encoded and decoded by the onebit kernels (no second sign packer):
//   u8 0   u32 bucket_size   nb = ceil(n / bucket_size) f32 scales   n sign bits, 1 = negative
// Bytes: 5 + 4 ceil(n / bucket_size) + ceil(n / 8); with the default one scale per tensor
// 9 + ceil(n / 8) for n >= 1 (3.13% of fp32).
//
// Parameters: beta (0.9, in [0, 0.9999]; 0 is plain signSGD), bucket_size (2^30: one scale
// per tensor).
// State (checkpoints): varint d, then d f32 (m). Encode mutates m: one instance per key and
// per side; a tensor of another size restarts m from zero. A NaN or Inf gradient throws
// InvalidArgument and leaves m unchanged. Decode is const.
#include <memory>
#include <vector>

#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "compressors/onebit.h"

namespace gradpress::compressors {

class SignumCompressor : public Compressor {
 public:
  explicit SignumCompressor(ParamReader& r);
  std::string Name() const override { return "signum"; }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
  void SaveState(std::string* out) const override;
  void LoadState(std::string_view in) override;

  const std::vector<float>& momentum() const { return momentum_; }

 private:
  float beta_;
  std::unique_ptr<OneBitCompressor> sign_;  // scaling mean, bucket_size
  std::vector<float> momentum_;
  std::vector<float> next_;  // the updated momentum, committed once it encoded
};

}  // namespace gradpress::compressors
