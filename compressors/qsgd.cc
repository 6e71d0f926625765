#include "compressors/qsgd.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "common/byte_io.h"
#include "compressors/bit_pack.h"

namespace gradpress::compressors {
namespace {
constexpr uint8_t kElias = 1, kMaxNorm = 2;
constexpr uint32_t kMaxBucket = 1u << 24;
}  // namespace

int QsgdCompressor::LevelBits(uint32_t s) {
  int b = 0;
  while ((1ull << b) < static_cast<uint64_t>(s) + 1) ++b;
  return b;
}

QsgdCompressor::QsgdCompressor(ParamReader& r)
    : levels_(static_cast<uint32_t>(r.Int("levels", 16, 1, 65535))),
      bucket_(static_cast<uint32_t>(r.Int("bucket_size", 512, 1, kMaxBucket))),
      max_norm_(r.Choice("norm", "l2", {"l2", "max"}) == "max"),
      elias_(r.Bool("elias", true)),
      rng_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))) {}

void QsgdCompressor::EncodeTo(const float* in, int64_t n, const StepContext&, std::string* out) {
  const int64_t nb = (n + bucket_ - 1) / bucket_;
  const int b = LevelBits(levels_);
  ByteWriter w(out);
  w.Put<uint8_t>((elias_ ? kElias : 0) | (max_norm_ ? kMaxNorm : 0));
  w.Put<uint16_t>(static_cast<uint16_t>(levels_));
  w.Put<uint32_t>(bucket_);
  // Upper bound on bits per element: fixed b + 1; gamma(s + 1) + sign = 2 floor(log2(s+1)) + 2.
  const int max_bits = elias_ ? 2 * (31 - __builtin_clz(levels_ + 1)) + 2 : b + 1;
  const size_t cap = (static_cast<size_t>(n) * max_bits + 7) / 8 + 8;
  const size_t norms_at = out->size();
  const size_t start = norms_at + static_cast<size_t>(nb) * sizeof(float);
  out->resize(start + cap);
  auto* norms = reinterpret_cast<float*>(out->data() + norms_at);
  BitWriter bits(out->data() + start, cap);
  const float s = static_cast<float>(levels_);
  for (int64_t k = 0; k < nb; ++k) {
    const float* v = in + k * bucket_;
    const int64_t len = std::min<int64_t>(bucket_, n - k * bucket_);
    double norm = 0.0;
    if (max_norm_) {
      float m = 0.f;
      for (int64_t i = 0; i < len; ++i) m = std::max(m, std::fabs(v[i]));
      norm = m;
    } else {
      float acc[8] = {};
      int64_t i = 0;
      for (; i + 8 <= len; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += v[i + j] * v[i + j];
      for (; i < len; ++i) acc[0] += v[i] * v[i];
      for (float a : acc) norm += a;
      norm = std::sqrt(norm);
    }
    GP_ENFORCE(std::isfinite(norm), "qsgd: bucket ", k, " has a NaN or Inf element");
    norms[k] = static_cast<float>(norm);
    const float scale = norms[k] > 0.f ? s / norms[k] : 0.f;
    for (int64_t i = 0; i < len; ++i) {
      const float r = std::fabs(v[i]) * scale;
      uint32_t level = static_cast<uint32_t>(r);
      level += rng_.Uniform() < r - static_cast<float>(level);
      level = std::min(level, levels_);
      const uint32_t neg = level > 0 && v[i] < 0.f;
      if (elias_) {
        bits.PutGamma(level + 1);
        if (level) bits.Put(neg, 1);
      } else {
        bits.Put(level | (neg << b), b + 1);
      }
    }
  }
  out->resize(start + bits.Finish());
}

void QsgdCompressor::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  ByteReader r(bytes, "qsgd");
  const auto flags = r.Get<uint8_t>("flags");
  GP_ENFORCE((flags & ~(kElias | kMaxNorm)) == 0, "qsgd: unknown flags ", int{flags});
  const uint32_t s = r.Get<uint16_t>("levels");
  const uint32_t bucket = r.Get<uint32_t>("bucket_size");
  GP_ENFORCE(s >= 1, "qsgd: levels must be at least 1");
  GP_ENFORCE(bucket >= 1 && bucket <= kMaxBucket, "qsgd: bucket_size ", bucket,
             " outside [1, 2^24]");
  const int64_t nb = (n + bucket - 1) / bucket;
  std::string_view raw_norms = r.GetBytes(static_cast<size_t>(nb) * sizeof(float), "norms");
  const auto* norms = reinterpret_cast<const unsigned char*>(raw_norms.data());
  const bool elias = flags & kElias;
  const int b = LevelBits(s);
  std::string_view stream = r.Rest();
  if (!elias) {
    const size_t expect = (static_cast<size_t>(n) * (b + 1) + 7) / 8;
    GP_ENFORCE(stream.size() == expect, "qsgd: bit stream has ", stream.size(),
               " bytes, expected ", expect);
  }
  BitReader bits(stream, "qsgd");
  for (int64_t k = 0; k < nb; ++k) {
    float norm;
    std::memcpy(&norm, norms + k * sizeof(float), sizeof(float));
    GP_ENFORCE(std::isfinite(norm) && norm >= 0.f, "qsgd: bucket ", k, " has norm ", norm);
    const float unit = norm / static_cast<float>(s);
    const int64_t begin = k * bucket, end = std::min<int64_t>(n, begin + bucket);
    for (int64_t i = begin; i < end; ++i) {
      uint32_t level, neg;
      if (elias) {
        level = bits.GetGamma() - 1;
        neg = level ? bits.Get(1) : 0;
      } else {
        const uint32_t sym = bits.Get(b + 1);
        level = sym & ((1u << b) - 1);
        neg = sym >> b;
      }
      GP_ENFORCE(level <= s, "qsgd: level ", level, " exceeds s=", s, " at element ", i);
      const float mag = static_cast<float>(level) * unit;
      out[i] = neg ? -mag : mag;
    }
  }
  bits.ExpectEnd();
}

}  // namespace gradpress::compressors
