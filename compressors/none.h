#pragma once
// none: the fp32 identity; the baseline every ratio is measured against.
// Wire format: numel x float32, little-endian. Bytes: 4n.
#include "compressors/compressor.h"
#include "compressors/compressor_config.h"

namespace gradpress::compressors {

class NoneCompressor : public Compressor {
 public:
  explicit NoneCompressor(ParamReader&) {}
  std::string Name() const override { return "none"; }
  bool IsLossless() const override { return true; }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
};

}  // namespace gradpress::compressors
