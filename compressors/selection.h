#pragma once
// Selection primitives shared by the sparsifiers: O(n) filtering, sampled thresholds and
// an exact k-largest reduction, without sorting the whole gradient.
//
// Exact top-k (topk.cc): a threshold from a jittered-stride sample of |g| aimed a little
// below the k-th magnitude, one filtering pass that keeps |g| > t in index order, then
// KeepLargest (a radix select on the ~1.3k survivors). torch::topk sorts; this touches the
// gradient once.
// Thread-safety: pure functions (the Rng argument is the caller's).
#include <cstdint>
#include <vector>

#include "compressors/rng.h"

namespace gradpress::compressors {

// Kept elements of a sparsified gradient, indices strictly increasing.
struct Selection {
  std::vector<int32_t> indices;
  std::vector<float> values;
  uint64_t seed = 0;  // for seeded index codings (randomk)
  void Clear() {
    indices.clear();
    values.clear();
    seed = 0;
  }
};

// k = round(ratio * n), at least 1 when n > 0, at most n.
int64_t KFromRatio(double ratio, int64_t n);

// Appends every i with in[i] < lo or in[i] > hi to sel, in index order (NaN never selected).
// Blocked so that blocks without a hit cost one vectorised compare.
void FilterOutside(const float* in, int64_t n, float lo, float hi, Selection* sel);
inline void FilterAbove(const float* in, int64_t n, float t, Selection* sel) {
  FilterOutside(in, n, -t, t, sel);
}

// A magnitude t such that about `ratio` of a sample of m values of |in| (jittered stride,
// so access stays sequential) exceed it. m >= n samples everything.
float SampledAbsThreshold(const float* in, int64_t n, double ratio, int64_t m, Rng* rng);

// Reduces sel to its k largest magnitudes, keeping index order; ties at the k-th magnitude
// are broken toward lower indices.
void KeepLargest(Selection* sel, int64_t k);

// Mean and (population) standard deviation in one pass, float lanes summed into doubles.
void MeanStd(const float* in, int64_t n, double* mean, double* std);

// z such that P(|Z| > z) = p for a standard normal Z, p in (0, 1].
double TwoSidedNormalQuantile(double p);

}  // namespace gradpress::compressors
