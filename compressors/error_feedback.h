#pragma once
// ErrorFeedback: the residual-memory decorator (Seide et al. 2014; Stich et al. 2018;
// Karimireddy et al., "Error Feedback Fixes SignSGD", ICML 2019).
//
//   p = g + e;   out = C(p);   e = p - D(out)
//
// so the sum of everything decoded plus the current residual equals the sum of every input:
// no gradient mass is ever lost, only delayed. One instance per key and per side (each
// worker keeps one per key for the push direction, the server one per key for the pull).
// The wire format is the inner codec's; Name() is the inner name.
//
//   ErrorFeedback ef(MakeCompressor(topk_config));   Payload p = ef.Encode(g, ctx);
//
// The residual is sized on first use; a later call with another numel throws
// InvalidArgument. Thread-safety: Encode mutates the residual; one thread per instance.
#include <memory>
#include <vector>

#include "compressors/compressor.h"

namespace gradpress::compressors {

class ErrorFeedback : public Compressor {
 public:
  explicit ErrorFeedback(std::unique_ptr<Compressor> inner);
  std::string Name() const override { return inner_->Name(); }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
  // State: varint numel, the residual's floats, then the inner codec's state.
  void SaveState(std::string* out) const override;
  void LoadState(std::string_view in) override;
  bool SetDensity(double ratio) override { return inner_->SetDensity(ratio); }

  const std::vector<float>& residual() const { return residual_; }
  // Restores a residual (checkpoints); its size fixes the numel.
  void set_residual(std::vector<float> r) { residual_ = std::move(r); }
  const Compressor& inner() const { return *inner_; }

 private:
  std::unique_ptr<Compressor> inner_;
  std::vector<float> residual_;
  std::vector<float> corrected_;  // p = g + e, reused (dense inner codecs)
  std::vector<int32_t> kept_;     // a sparse inner codec's kept indices and values, reused
  std::vector<float> kept_values_;
};

}  // namespace gradpress::compressors
