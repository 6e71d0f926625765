#pragma once
// int8: uniform 8-bit min-max quantisation over the whole tensor, round to nearest.
//   scale = (max - min) / 255,  q_i = round((x_i - min) / scale),  x^_i = min + q_i * scale
// |x_i - x^_i| <= scale / 2. Deterministic (biased by at most scale / 2).
// Wire format: f32 min, f32 scale (finite, >= 0), then numel x uint8 q. Bytes: 8 + n.
#include "compressors/compressor.h"
#include "compressors/compressor_config.h"

namespace gradpress::compressors {

class Int8Compressor : public Compressor {
 public:
  explicit Int8Compressor(ParamReader&) {}
  std::string Name() const override { return "int8"; }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
};

}  // namespace gradpress::compressors
