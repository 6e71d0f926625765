#include "compressors/selection.h"

#include <algorithm>
#include <cmath>

namespace gradpress::compressors {

int64_t KFromRatio(double ratio, int64_t n) {
  if (n <= 0) return 0;
  const auto k = static_cast<int64_t>(std::llround(ratio * static_cast<double>(n)));
  return std::clamp<int64_t>(k, 1, n);
}

void FilterOutside(const float* in, int64_t n, float lo, float hi, Selection* sel) {
  constexpr int64_t kBlock = 64;
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    const float* p = in + i;
    int hits = 0;
    for (int j = 0; j < kBlock; ++j) hits += (p[j] > hi) | (p[j] < lo);  // vectorises
    if (hits == 0) continue;
    for (int j = 0; j < kBlock; ++j) {
      if (p[j] > hi || p[j] < lo) {
        sel->indices.push_back(static_cast<int32_t>(i + j));
        sel->values.push_back(p[j]);
      }
    }
  }
  for (; i < n; ++i) {
    if (in[i] > hi || in[i] < lo) {
      sel->indices.push_back(static_cast<int32_t>(i));
      sel->values.push_back(in[i]);
    }
  }
}

float SampledAbsThreshold(const float* in, int64_t n, double ratio, int64_t m, Rng* rng) {
  if (n <= 0) return 0.f;
  std::vector<float> sample;
  if (m >= n) {
    sample.resize(n);
    for (int64_t i = 0; i < n; ++i) sample[i] = std::fabs(in[i]);
  } else {
    m = std::max<int64_t>(m, 1);
    sample.resize(m);
    const double stride = static_cast<double>(n) / static_cast<double>(m);
    for (int64_t s = 0; s < m; ++s) {
      const auto base = static_cast<int64_t>(static_cast<double>(s) * stride);
      const auto width = std::max<int64_t>(
          1, static_cast<int64_t>(static_cast<double>(s + 1) * stride) - base);
      sample[s] = std::fabs(in[std::min(n - 1, base + static_cast<int64_t>(rng->Below(width)))]);
    }
  }
  const int64_t above = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(ratio * static_cast<double>(sample.size()))), 1,
      static_cast<int64_t>(sample.size()));
  // The element with `above` samples at or above it; strict filtering then keeps about ratio.
  auto nth = sample.begin() + (static_cast<int64_t>(sample.size()) - above);
  std::nth_element(sample.begin(), nth, sample.end());
  // Step just below so that the nth sample itself passes a strict '>' filter.
  return std::nextafter(*nth, 0.f);
}

void KeepLargest(Selection* sel, int64_t k) {
  const auto size = static_cast<int64_t>(sel->values.size());
  if (size <= k) return;
  if (k <= 0) {
    sel->indices.clear();
    sel->values.clear();
    return;
  }
  std::vector<float> mag(size);
  for (int64_t i = 0; i < size; ++i) mag[i] = std::fabs(sel->values[i]);
  auto nth = mag.begin() + (size - k);
  std::nth_element(mag.begin(), nth, mag.end());
  const float kth = *nth;
  int64_t greater = 0;
  for (auto it = nth + 1; it != mag.end(); ++it) greater += *it > kth;
  int64_t ties = k - greater;
  int64_t w = 0;
  for (int64_t i = 0; i < size; ++i) {
    const float a = std::fabs(sel->values[i]);
    if (a > kth || (a == kth && ties > 0)) {
      if (a == kth) --ties;
      sel->indices[w] = sel->indices[i];
      sel->values[w] = sel->values[i];
      ++w;
    }
  }
  sel->indices.resize(w);
  sel->values.resize(w);
}

void MeanStd(const float* in, int64_t n, double* mean, double* std) {
  if (n <= 0) {
    *mean = *std = 0.0;
    return;
  }
  // Shift by the first element to limit cancellation in sum of squares.
  const float shift = in[0];
  constexpr int kLanes = 16;
  constexpr int64_t kBlock = 4096;
  double sum = 0.0, sumsq = 0.0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t end = std::min(n, b + kBlock);
    float s[kLanes] = {}, q[kLanes] = {};
    int64_t i = b;
    for (; i + kLanes <= end; i += kLanes) {
      for (int j = 0; j < kLanes; ++j) {
        const float d = in[i + j] - shift;
        s[j] += d;
        q[j] += d * d;
      }
    }
    for (; i < end; ++i) {
      const float d = in[i] - shift;
      s[0] += d;
      q[0] += d * d;
    }
    for (int j = 0; j < kLanes; ++j) {
      sum += s[j];
      sumsq += q[j];
    }
  }
  const double m = sum / static_cast<double>(n);
  *mean = m + shift;
  *std = std::sqrt(std::max(0.0, sumsq / static_cast<double>(n) - m * m));
}

double TwoSidedNormalQuantile(double p) {
  if (p >= 1.0) return 0.0;
  double lo = 0.0, hi = 40.0;
  for (int it = 0; it < 100; ++it) {  // P(|Z| > z) = erfc(z / sqrt 2), decreasing in z
    const double mid = 0.5 * (lo + hi);
    (std::erfc(mid / std::sqrt(2.0)) > p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace gradpress::compressors
