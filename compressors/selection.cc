#include "compressors/selection.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace gradpress::compressors {

int64_t KFromRatio(double ratio, int64_t n) {
  if (n <= 0) return 0;
  const auto k = static_cast<int64_t>(std::llround(ratio * static_cast<double>(n)));
  return std::clamp<int64_t>(k, 1, n);
}

namespace {
inline void Keep(Selection* sel, int64_t i, float v) {
  sel->indices.push_back(static_cast<int32_t>(i));
  sel->values.push_back(v);
}

// |x|'s bit pattern: for non-negative floats the order of the patterns is that of the values.
inline uint32_t MagnitudeBits(float x) {
  uint32_t b;
  std::memcpy(&b, &x, sizeof(b));
  return b & 0x7fffffffu;
}

// The r-th smallest (0-based) of the magnitudes whose bit patterns (MagnitudeBits) are in
// *bits, the value nth_element would place at r; *bits is scratch. A radix select: three
// histogram passes of 11, 11 and 10 bits from the top, each over the survivors of the last.
float NthMagnitude(std::vector<uint32_t>* bits, size_t r) {
  std::vector<uint32_t>& b = *bits;
  size_t live = b.size();
  for (const int shift : {21, 10, 0}) {
    const uint32_t mask = shift == 0 ? 0x3ffu : 0x7ffu;
    size_t count[2048] = {};
    for (size_t i = 0; i < live; ++i) ++count[(b[i] >> shift) & mask];
    uint32_t bucket = 0;
    while (r >= count[bucket]) r -= count[bucket++];
    size_t w = 0;
    for (size_t i = 0; i < live; ++i)
      if (((b[i] >> shift) & mask) == bucket) b[w++] = b[i];
    live = w;
  }
  float out;
  std::memcpy(&out, &b[0], sizeof(out));
  return out;
}
}  // namespace

void FilterOutside(const float* in, int64_t n, float lo, float hi, Selection* sel) {
  int64_t i = 0;
#ifdef __SSE2__
  // 16 elements per step: four compares and a movemask; blocks without a hit (most of
  // them at 1% density) cost nothing more, hits are visited through the bit mask.
  const __m128 vlo = _mm_set1_ps(lo), vhi = _mm_set1_ps(hi);
  for (; i + 16 <= n; i += 16) {
    uint32_t mask = 0;
    for (int j = 0; j < 4; ++j) {
      const __m128 x = _mm_loadu_ps(in + i + 4 * j);
      const __m128 out = _mm_or_ps(_mm_cmpgt_ps(x, vhi), _mm_cmplt_ps(x, vlo));
      mask |= static_cast<uint32_t>(_mm_movemask_ps(out)) << (4 * j);
    }
    while (mask) {
      const int j = __builtin_ctz(mask);
      Keep(sel, i + j, in[i + j]);
      mask &= mask - 1;
    }
  }
#endif
  for (; i < n; ++i) {
    if (in[i] > hi || in[i] < lo) Keep(sel, i, in[i]);
  }
}

float SampledAbsThreshold(const float* in, int64_t n, double ratio, int64_t m, Rng* rng) {
  if (n <= 0) return 0.f;
  std::vector<uint32_t> sample;  // magnitudes' bits (MagnitudeBits)
  if (m >= n) {
    sample.resize(n);
    for (int64_t i = 0; i < n; ++i) sample[i] = MagnitudeBits(in[i]);
  } else {
    m = std::max<int64_t>(m, 1);
    sample.resize(m);
    const double stride = static_cast<double>(n) / static_cast<double>(m);
    for (int64_t s = 0; s < m; ++s) {
      const auto base = static_cast<int64_t>(static_cast<double>(s) * stride);
      const auto width =
          std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(s + 1) * stride) - base);
      sample[s] =
          MagnitudeBits(in[std::min(n - 1, base + static_cast<int64_t>(rng->Below(width)))]);
    }
  }
  const int64_t above = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(ratio * static_cast<double>(sample.size()))), 1,
      static_cast<int64_t>(sample.size()));
  // The element with `above` samples at or above it; strict filtering then keeps about ratio.
  const float nth = NthMagnitude(&sample, sample.size() - static_cast<size_t>(above));
  // Step just below so that the nth sample itself passes a strict '>' filter.
  return std::nextafter(nth, 0.f);
}

void KeepLargest(Selection* sel, int64_t k) {
  const auto size = static_cast<int64_t>(sel->values.size());
  if (size <= k) return;
  if (k <= 0) {
    sel->indices.clear();
    sel->values.clear();
    return;
  }
  std::vector<uint32_t> bits(size);
  for (int64_t i = 0; i < size; ++i) bits[i] = MagnitudeBits(sel->values[i]);
  const float kth = NthMagnitude(&bits, static_cast<size_t>(size - k));
  int64_t greater = 0;
  for (const float v : sel->values) greater += std::fabs(v) > kth;
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
