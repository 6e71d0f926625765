#pragma once
// dgc: the sparsifier of Deep Gradient Compression (Lin et al., ICLR 2018).
//
// The threshold comes from a random sample of sample_ratio * n elements (1%): t is the
// magnitude that `ratio` of the sample exceeds. One pass keeps |g_i| > t. Then the count is
// adapted toward k = round(ratio * n): above k, an exact top-k over the survivors (the
// paper's hierarchical selection); below 0.8 k, t is lowered by 25% and the pass repeated
// (at most 3 times). Momentum correction, masking, clipping and the sparsity warm-up are
// training-side and live in the worker.
//
// Wire format: the sparsifier format (sparsifier.h).
// Parameters: ratio (0.01), sample_ratio (0.01), index_coding (delta | int32), seed (1).
#include "compressors/sparsifier.h"

namespace gradpress::compressors {

class DgcCompressor : public Sparsifier {
 public:
  explicit DgcCompressor(ParamReader& r);
  std::string Name() const override { return "dgc"; }
  void Select(const float* in, int64_t n, const StepContext& ctx, Selection* sel) override;
  void SaveState(std::string* out) const override { SaveRngState(rng_, out); }
  void LoadState(std::string_view in) override { LoadRngState(in, "dgc", &rng_); }
  bool SetDensity(double ratio) override;

 private:
  double ratio_;
  double sample_ratio_;
  Rng rng_;
};

}  // namespace gradpress::compressors
