#include "compressors/topk.h"

#include <algorithm>
#include <limits>

#include "common/error.h"

namespace gradpress::compressors {

TopKCompressor::TopKCompressor(ParamReader& r)
    : Sparsifier(ReadIndexCoding(r)),
      ratio_(r.Double("ratio", 0.01, 0.0, 1.0)),
      k_(r.Int("k", 0, 0, std::numeric_limits<int32_t>::max())),
      rng_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))) {
  GP_ENFORCE(!(r.Has("k") && r.Has("ratio")), "topk: give either ratio or k, not both");
}

void TopKCompressor::Select(const float* in, int64_t n, const StepContext&, Selection* sel) {
  SelectTopK(in, n, k_ ? std::min(k_, n) : KFromRatio(ratio_, n), &rng_, sel);
}

void SelectTopK(const float* in, int64_t n, int64_t k, Rng* rng, Selection* sel) {
  if (k <= 0 || n <= 0) return;
  // 0.5% of the tensor, at least 8192 samples (the whole tensor when it is smaller). A
  // 65536 floor made top-k slower than torch::topk on 100k-element layers.
  const int64_t sample = std::max<int64_t>(8192, n / 200);
  const double ratio = static_cast<double>(k) / static_cast<double>(n);
  // Aim 30% above k (plus a margin for tiny k) so one pass nearly always suffices; each
  // retry asks for 4x more survivors; the last one keeps every non-zero.
  double aim = std::min(1.0, ratio * 1.3 + 64.0 / static_cast<double>(std::min(n, sample)));
  for (int attempt = 0;; ++attempt) {
    const float t = attempt < 3 ? SampledAbsThreshold(in, n, aim, sample, rng) : 0.f;
    sel->Clear();
    FilterAbove(in, n, t, sel);
    if (static_cast<int64_t>(sel->indices.size()) >= k || t == 0.f) break;
    aim = std::min(1.0, aim * 4.0);
  }
  KeepLargest(sel, k);
}

bool TopKCompressor::SetDensity(double ratio) {
  GP_ENFORCE(ratio > 0 && ratio <= 1, "topk: density ", ratio, " is not in (0, 1]");
  ratio_ = ratio;
  k_ = 0;
  return true;
}

}  // namespace gradpress::compressors
