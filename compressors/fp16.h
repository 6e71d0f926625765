#pragma once
// fp16: IEEE 754 binary16 cast (round to nearest even; overflow to +-inf, NaN kept).
// Wire format: numel x uint16 (binary16 bits), little-endian. Bytes: 2n (ratio 2).
// Max relative error 2^-11 for normal halves (|x| in [6.1e-5, 65504]).
#include <cstdint>

#include "compressors/compressor.h"
#include "compressors/compressor_config.h"

namespace gradpress::compressors {

uint16_t FloatToHalf(float f);
float HalfToFloat(uint16_t h);

class Fp16Compressor : public Compressor {
 public:
  explicit Fp16Compressor(ParamReader&) {}
  std::string Name() const override { return "fp16"; }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
};

}  // namespace gradpress::compressors
