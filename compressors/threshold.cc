#include "compressors/threshold.h"

namespace gradpress::compressors {

ThresholdCompressor::ThresholdCompressor(ParamReader& r)
    : Sparsifier(ReadIndexCoding(r)),
      threshold_(static_cast<float>(r.Double("threshold", 0.01, 0.0, 3.0e38))) {}

void ThresholdCompressor::Select(const float* in, int64_t n, const StepContext&, Selection* sel) {
  FilterAbove(in, n, threshold_, sel);
}

}  // namespace gradpress::compressors
