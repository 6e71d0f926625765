#pragma once
// randomk: random-k sparsification with a shared seed (Stich et al., "Sparsified SGD with
// Memory", NeurIPS 2018; Wangni et al., NeurIPS 2018 for the unbiased d/k rescaling).
//
// The seed is Seed(seed, key, step) (rng.h), the same on every worker and on the server, so
// the payload carries the 8-byte seed instead of indices. Sampling is stratified: the
// tensor is cut into k blocks [floor(j n / k), floor((j+1) n / k)) and one index is drawn
// uniformly in each, so every element is kept with probability 1 / |block| ~= k / n and the
// indices come out sorted in O(k). With unbiased (default) each kept value is multiplied by
// its block's size, so E[D(C(g))] = g exactly.
//
// Wire format: the sparsifier format (sparsifier.h) with index coding 2 (seeded):
//   u8 2, varint k, u64 seed, k x f32 values.  Bytes: 9 + len(varint k) + 4k.
//
// Parameters: ratio (0.01), seed (1), unbiased (true). Pass the StepContext (key, step) to
// Encode: the same context gives the same indices.
#include "compressors/sparsifier.h"

namespace gradpress::compressors {

class RandomKCompressor : public Sparsifier {
 public:
  explicit RandomKCompressor(ParamReader& r);
  std::string Name() const override { return "randomk"; }
  void Select(const float* in, int64_t n, const StepContext& ctx, Selection* sel) override;
  void WriteIndices(const Selection& sel, std::string* out) const override;
  void ReadIndices(ByteReader& r, int64_t n, std::vector<int32_t>* indices) const override;
  bool SetDensity(double ratio) override;

 private:
  double ratio_;
  uint64_t seed_;
  bool unbiased_;
};

// The stratified indices for (seed, k, n); sizes, if given, receives each block's size.
void StratifiedIndices(uint64_t seed, int64_t k, int64_t n, std::vector<int32_t>* indices,
                       std::vector<int64_t>* sizes = nullptr);

}  // namespace gradpress::compressors
