#include "server/sparse_accum.h"

#include <cmath>
#include <cstring>

namespace gradpress::server {
namespace {

constexpr size_t kAhead = 64;

bool NegativeZero(float x) { return x == 0.f && std::signbit(x); }

}  // namespace

void AssignSparse(const std::vector<int32_t>& idx, const std::vector<float>& val, int64_t n,
                  float* acc, SignedZeros* z) {
  if (n > 0) std::memset(acc, 0, static_cast<size_t>(n) * sizeof(float));
  z->anywhere = false;
  z->at.clear();
  for (size_t j = 0; j < idx.size(); ++j) {
    acc[idx[j]] = val[j];
    if (NegativeZero(val[j])) z->at.push_back(idx[j]);
  }
}

void AddSparse(const std::vector<int32_t>& idx, const std::vector<float>& val, int64_t n,
               float* acc, SignedZeros* z) {
  // `x += 0.f` below is the dense add of an untouched element: it maps -0.0 to +0.0 and
  // leaves everything else as it is (IEEE round-to-nearest; the build has no -ffast-math).
  std::vector<int32_t> next;  // where the row holds -0.0 after this add: touched elements only
  if (z->anywhere) {
    int64_t e = 0;
    for (size_t j = 0; j < idx.size(); ++j, ++e) {
      for (; e < idx[j]; ++e) acc[e] += 0.f;
      acc[e] += val[j];
      if (NegativeZero(acc[e])) next.push_back(idx[j]);
    }
    for (; e < n; ++e) acc[e] += 0.f;
  } else {
    const std::vector<int32_t>& zeros = z->at;
    size_t c = 0;
    for (size_t j = 0; j < idx.size(); ++j) {
      const int32_t i = idx[j];
      // Scattered over the row: ask for the element kAhead adds ahead (cache misses overlap).
      if (j + kAhead < idx.size()) __builtin_prefetch(acc + idx[j + kAhead], 1);
      for (; c < zeros.size() && zeros[c] < i; ++c) acc[zeros[c]] += 0.f;
      if (c < zeros.size() && zeros[c] == i) ++c;  // touched: gets its value, not 0
      acc[i] += val[j];
      if (NegativeZero(acc[i])) next.push_back(i);
    }
    for (; c < zeros.size(); ++c) acc[zeros[c]] += 0.f;
  }
  z->anywhere = false;
  z->at = std::move(next);
}

}  // namespace gradpress::server
