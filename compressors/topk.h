#pragma once
// topk: exact top-k by magnitude (Aji & Heafield, "Sparse Communication for Distributed
// Gradient Descent", EMNLP 2017; Stich et al., "Sparsified SGD with Memory", NeurIPS 2018).
//
// Keeps the k = round(ratio * n) elements of largest |g_i| (ties at the k-th magnitude go to
// lower indices; exact zeros are never sent, so k' = min(k, nnz)). Selection is O(n):
// a jittered-stride sample of |g| gives a threshold a little below the k-th magnitude, one
// pass keeps |g_i| above it, a radix select on those ~1.3k survivors cuts to exactly k
// (selection.h). If the sample overshoots, the threshold is lowered and the pass repeated.
//
// Wire format: the sparsifier format (sparsifier.h). With index_coding int32 the bytes are
// 1 + len(varint k) + 8k; with delta (default) 1 + len(varint k) + sum of varint gap
// lengths + 4k.
//
// Parameters: ratio (0.01) or k (elements), index_coding (delta | int32), seed (1, sampling).
#include "compressors/sparsifier.h"

namespace gradpress::compressors {

class TopKCompressor : public Sparsifier {
 public:
  explicit TopKCompressor(ParamReader& r);
  std::string Name() const override { return "topk"; }
  void Select(const float* in, int64_t n, const StepContext& ctx, Selection* sel) override;
  void SaveState(std::string* out) const override { SaveRngState(rng_, out); }
  void LoadState(std::string_view in) override { LoadRngState(in, "topk", &rng_); }
  bool SetDensity(double ratio) override;

 private:
  double ratio_;
  int64_t k_;  // 0: use ratio_
  Rng rng_;
};

// Exact k-largest selection used by topk (exposed for dgc and tests).
void SelectTopK(const float* in, int64_t n, int64_t k, Rng* rng, Selection* sel);

}  // namespace gradpress::compressors
