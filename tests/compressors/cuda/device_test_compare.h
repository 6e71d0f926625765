#pragma once
// What the GPU codec tests (device_*_test.cc) compare and how they report it: floats and
// payloads as one line saying where they differ, the codecs' saved states, and the inputs
// whose topk bytes depend on the tie rule.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "compressors/compressor.h"
#include "compressors/cuda/device_codec.h"

namespace gradpress::compressors::cuda::testing {

// "" when a and b hold the same floats (+0 equals -0, any two NaNs count as equal), else where
// they differ: CHECK(Mismatch(a, b) == "") then prints a line, not a million floats.
inline std::string Mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "element %zu of %zu: %.9g and %.9g", i, a.size(), a[i], b[i]);
    return buf;
  }
  return "";
}

// "" when two payloads are the same bytes, else their sizes and first differing byte.
inline std::string PayloadMismatch(std::string_view a, std::string_view b) {
  if (a == b) return "";
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto byte = [](std::string_view s, size_t at) {
    return at < s.size() ? std::to_string(static_cast<uint8_t>(s[at])) : std::string("end");
  };
  return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size()) +
         ", first difference at byte " + std::to_string(i) + " (" + byte(a, i) + " and " +
         byte(b, i) + ")";
}

// True when the k-th and (k+1)-th largest magnitudes are equal (topk's bytes then depend on
// the tie rule, which another test covers).
inline bool TieAtKth(const std::vector<float>& x, int64_t k) {
  if (k <= 0 || k >= static_cast<int64_t>(x.size())) return false;
  std::vector<float> mags(x.size());
  for (size_t i = 0; i < x.size(); ++i) mags[i] = std::fabs(x[i]);
  std::nth_element(mags.begin(), mags.begin() + k, mags.end(), std::greater<float>());
  const float next = mags[k];
  const float kth = *std::min_element(mags.begin(), mags.begin() + k);
  return kth == next && next != 0.f;
}

inline std::string SaveState(const DeviceCodec& c) {
  std::string s;
  c.SaveState(&s);
  return s;
}
inline std::string SaveState(const Compressor& c) {
  std::string s;
  c.SaveState(&s);
  return s;
}

}  // namespace gradpress::compressors::cuda::testing
