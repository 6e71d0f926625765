#pragma once
// Pipeline: a sparsifier, then a quantizer of the values it keeps (method 5 of the survey is
// topk then qsgd). Name: "<sparsifier>+<quantizer>", e.g. "topk+qsgd".
//
// Wire format: the sparsifier's coding byte, k and indices (sparsifier.h), then the
// quantizer's own payload for the k kept values (to the end of the bytes).
// Bytes: sparsifier index bytes + quantizer bytes for a k-element tensor.
//
//   Pipeline p(std::make_unique<TopKCompressor>(r1), MakeCompressor(qsgd_config));
//
// Thread-safety: as Compressor.
#include <memory>

#include "compressors/sparsifier.h"

namespace gradpress::compressors {

class Pipeline : public Compressor {
 public:
  Pipeline(std::unique_ptr<Sparsifier> sparsifier, std::unique_ptr<Compressor> quantizer);
  std::string Name() const override { return sparsifier_->Name() + "+" + quantizer_->Name(); }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
  bool IsSparse() const override { return true; }
  // The kept indices and their dequantised values (Compressor::DecodeSparse).
  bool DecodeSparse(std::string_view bytes, int64_t n, std::vector<int32_t>* indices,
                    std::vector<float>* values) const override;
  // State: varint length + the sparsifier's state, then the quantizer's.
  void SaveState(std::string* out) const override;
  void LoadState(std::string_view in) override;
  bool SetDensity(double ratio) override { return sparsifier_->SetDensity(ratio); }

 private:
  std::unique_ptr<Sparsifier> sparsifier_;
  std::unique_ptr<Compressor> quantizer_;
  Selection scratch_;
};

}  // namespace gradpress::compressors
