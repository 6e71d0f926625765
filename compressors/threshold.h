#pragma once
// threshold: keep every element with |g_i| > t (Strom, "Scalable Distributed DNN Training
// Using Commodity GPU Cloud Computing", Interspeech 2015). The count follows the data:
// the default t = 0.01 suits gradients of scale ~1e-2; pair it with error feedback.
//
// Wire format: the sparsifier format (sparsifier.h).
// Parameters: threshold (0.01), index_coding (delta | int32).
#include "compressors/sparsifier.h"

namespace gradpress::compressors {

class ThresholdCompressor : public Sparsifier {
 public:
  explicit ThresholdCompressor(ParamReader& r);
  std::string Name() const override { return "threshold"; }
  void Select(const float* in, int64_t n, const StepContext& ctx, Selection* sel) override;

 private:
  float threshold_;
};

}  // namespace gradpress::compressors
