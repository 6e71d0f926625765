#pragma once
// MomentumCorrection: Deep Gradient Compression's worker-side state (Lin et al., "Deep
// Gradient Compression", ICLR 2018, sections 3.2-3.3), as a decorator around a sparsifier
// (optionally followed by a quantizer).
//
//   u = m u + g                  momentum correction: the momentum is accumulated locally,
//   v = v + u                    so what is sent is the momentum-corrected update
//   out = C(v);  s = D(out)
//   v = v - s                    the sent part leaves the accumulator (= 0 where a pure
//                                sparsifier sent the exact value)
//   u[i] = 0 where s[i] != 0     momentum factor masking: sent coordinates stop carrying
//                                stale momentum
//
// The server averages the sparse updates and every worker applies them with plain SGD
// (momentum 0: it is already inside u). Local gradient clipping and the sparsity warm-up are
// the trainer's (worker/loop/trainer.h). The wire format is the inner codec's; Name() is its name.
//
//   MomentumCorrection mc(MakeCompressor(dgc_config), /*momentum=*/0.9);
//
// Thread-safety: Encode mutates u and v; one thread per instance.
#include <memory>
#include <vector>

#include "compressors/compressor.h"

namespace gradpress::compressors {

class MomentumCorrection : public Compressor {
 public:
  MomentumCorrection(std::unique_ptr<Compressor> inner, double momentum);
  std::string Name() const override { return inner_->Name(); }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
  // State: varint numel, u's floats, v's floats, then the inner codec's state.
  void SaveState(std::string* out) const override;
  void LoadState(std::string_view in) override;
  bool SetDensity(double ratio) override { return inner_->SetDensity(ratio); }

  const std::vector<float>& velocity() const { return u_; }     // u
  const std::vector<float>& accumulated() const { return v_; }  // v
  double momentum() const { return momentum_; }

 private:
  std::unique_ptr<Compressor> inner_;
  float momentum_;
  std::vector<float> u_, v_, sent_;
};

}  // namespace gradpress::compressors
