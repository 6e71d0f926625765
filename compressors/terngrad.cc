#include "compressors/terngrad.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "common/byte_io.h"
#include "compressors/bit_pack.h"

namespace gradpress::compressors {

TernGradCompressor::TernGradCompressor(ParamReader& r)
    : bucket_(r.Int("bucket_size", 0, 0, std::numeric_limits<uint32_t>::max())),
      rng_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))) {}

void TernGradCompressor::EncodeTo(const float* in, int64_t n, const StepContext&,
                                  std::string* out) {
  const int64_t bucket = std::max<int64_t>(1, bucket_ ? bucket_ : n);
  GP_ENFORCE(bucket <= std::numeric_limits<uint32_t>::max(), "terngrad: tensor too large");
  const int64_t nb = (n + bucket - 1) / bucket;
  ByteWriter w(out);
  w.Put<uint32_t>(static_cast<uint32_t>(bucket));
  const size_t scales_at = out->size();
  const size_t start = scales_at + nb * sizeof(float);
  const size_t cap = (2 * static_cast<size_t>(n) + 7) / 8 + 8;
  out->resize(start + cap);
  char* scales = out->data() + scales_at;  // unaligned after a sparsifier's indices: memcpy
  BitWriter bits(out->data() + start, cap);
  for (int64_t k = 0; k < nb; ++k) {
    const float* v = in + k * bucket;
    const int64_t len = std::min(bucket, n - k * bucket);
    float m = 0.f;
    for (int64_t i = 0; i < len; ++i) m = std::max(m, std::fabs(v[i]));
    GP_ENFORCE(std::isfinite(m), "terngrad: bucket ", k, " has a NaN or Inf element");
    std::memcpy(scales + k * sizeof(float), &m, sizeof(float));
    const float inv = m > 0.f ? 1.f / m : 0.f;
    for (int64_t i = 0; i < len; ++i) {
      const uint32_t keep = rng_.Uniform() < std::fabs(v[i]) * inv;
      bits.Put(keep << (v[i] < 0.f), 2);  // 0, 1 = +s, 2 = -s; branch-free
    }
  }
  out->resize(start + bits.Finish());
}

void TernGradCompressor::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  ByteReader r(bytes, "terngrad");
  const uint32_t bucket = r.Get<uint32_t>("bucket_size");
  GP_ENFORCE(bucket >= 1, "terngrad: bucket_size must be at least 1");
  const int64_t nb = (n + bucket - 1) / bucket;
  std::string_view raw = r.GetBytes(static_cast<size_t>(nb) * sizeof(float), "scales");
  std::string_view stream = r.Rest();
  const size_t expect = (2 * static_cast<size_t>(n) + 7) / 8;
  GP_ENFORCE(stream.size() == expect, "terngrad: bit stream has ", stream.size(),
             " bytes, expected ", expect);
  BitReader bits(stream, "terngrad");
  for (int64_t k = 0; k < nb; ++k) {
    float s;
    std::memcpy(&s, raw.data() + k * sizeof(float), sizeof(float));
    GP_ENFORCE(std::isfinite(s) && s >= 0.f, "terngrad: bucket ", k, " has scale ", s);
    const int64_t begin = k * bucket, end = std::min<int64_t>(n, begin + bucket);
    const float value[4] = {0.f, s, -s, 0.f};
    uint32_t invalid = 0;
    for (int64_t i = begin; i < end; ++i) {
      const uint32_t t = bits.Get(2);
      invalid |= t == 3;
      out[i] = value[t];
    }
    GP_ENFORCE(!invalid, "terngrad: invalid ternary symbol 3 in bucket ", k);
  }
  bits.ExpectEnd();
}

}  // namespace gradpress::compressors
