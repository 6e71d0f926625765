#pragma once
// gaussiank: threshold from a Gaussian fit (Shi et al., "Understanding Top-k Sparsification
// in Distributed Deep Learning", 2019 — the Gaussian-k operator).
//
// Fits N(mu, sigma^2) to g in one pass (mean and standard deviation), then keeps the
// elements outside [mu - z sigma, mu + z sigma] with z such that P(|Z| > z) = ratio.
// O(n), two passes over g, no sort. If g is Gaussian about ratio * n elements are kept;
// heavier tails keep more, lighter tails fewer (the count is reported, not forced).
//
// Wire format: the sparsifier format (sparsifier.h).
// Parameters: ratio (0.01), index_coding (delta | int32).
#include "compressors/sparsifier.h"

namespace gradpress::compressors {

class GaussianKCompressor : public Sparsifier {
 public:
  explicit GaussianKCompressor(ParamReader& r);
  std::string Name() const override { return "gaussiank"; }
  void Select(const float* in, int64_t n, const StepContext& ctx, Selection* sel) override;
  bool SetDensity(double ratio) override;

 private:
  double z_;
};

}  // namespace gradpress::compressors
