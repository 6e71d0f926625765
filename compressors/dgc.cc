#include "compressors/dgc.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"

namespace gradpress::compressors {

DgcCompressor::DgcCompressor(ParamReader& r)
    : Sparsifier(ReadIndexCoding(r)),
      ratio_(r.Double("ratio", 0.01, 0.0, 1.0)),
      sample_ratio_(r.Double("sample_ratio", 0.01, 1e-6, 1.0)),
      rng_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))) {}

void DgcCompressor::Select(const float* in, int64_t n, const StepContext&, Selection* sel) {
  const int64_t k = KFromRatio(ratio_, n);
  if (k == 0) return;
  const auto sample = std::max<int64_t>(std::min<int64_t>(n, 1024),
                                        std::llround(sample_ratio_ * static_cast<double>(n)));
  float t = SampledAbsThreshold(in, n, ratio_, sample, &rng_);
  for (int round = 0;; ++round) {
    sel->Clear();
    FilterAbove(in, n, t, sel);
    const auto count = static_cast<int64_t>(sel->indices.size());
    if (count >= (k * 4) / 5 || round == 3 || t == 0.f) break;
    t *= 0.75f;
  }
  KeepLargest(sel, k);
}

bool DgcCompressor::SetDensity(double ratio) {
  GP_ENFORCE(ratio > 0 && ratio <= 1, "dgc: density ", ratio, " is not in (0, 1]");
  ratio_ = ratio;
  return true;
}

}  // namespace gradpress::compressors
