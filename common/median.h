#pragma once
// The median of repeated measurements (timings in benches and calibrations).
//
//   double typical_ms = Median(samples_ms);
//
// Thread-safety: a pure function.
#include <algorithm>
#include <vector>

namespace gradpress {

// Median of v (the mean of the middle two for an even size); v must not be empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

}  // namespace gradpress
