#include "compressors/gaussiank.h"

#include <cmath>

#include "common/error.h"

namespace gradpress::compressors {

GaussianKCompressor::GaussianKCompressor(ParamReader& r)
    : Sparsifier(ReadIndexCoding(r)),
      z_(TwoSidedNormalQuantile(r.Double("ratio", 0.01, 1e-9, 1.0))) {}

void GaussianKCompressor::Select(const float* in, int64_t n, const StepContext&, Selection* sel) {
  double mean, std;
  MeanStd(in, n, &mean, &std);
  GP_ENFORCE(std::isfinite(mean) && std::isfinite(std), "gaussiank: input has NaN or Inf");
  FilterOutside(in, n, static_cast<float>(mean - z_ * std), static_cast<float>(mean + z_ * std),
                sel);
}

bool GaussianKCompressor::SetDensity(double ratio) {
  GP_ENFORCE(ratio >= 1e-9 && ratio <= 1, "gaussiank: density ", ratio, " is not in [1e-9, 1]");
  z_ = TwoSidedNormalQuantile(ratio);
  return true;
}

}  // namespace gradpress::compressors
