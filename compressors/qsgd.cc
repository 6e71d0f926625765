#include "compressors/qsgd.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "common/byte_io.h"
#include "compressors/bit_pack.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

namespace gradpress::compressors {
namespace {
constexpr uint8_t kElias = QsgdHeader::kElias, kMaxNorm = QsgdHeader::kMaxNorm;
constexpr uint32_t kMaxBucket = QsgdHeader::kMaxBucket;
}  // namespace

QsgdHeader ReadQsgdHeader(ByteReader& r) {
  QsgdHeader h;
  h.flags = r.Get<uint8_t>("flags");
  GP_ENFORCE((h.flags & ~(kElias | kMaxNorm)) == 0, "qsgd: unknown flags ", int{h.flags});
  h.levels = r.Get<uint16_t>("levels");
  h.bucket = r.Get<uint32_t>("bucket_size");
  GP_ENFORCE(h.levels >= 1, "qsgd: levels must be at least 1");
  GP_ENFORCE(h.bucket >= 1 && h.bucket <= kMaxBucket, "qsgd: bucket_size ", h.bucket,
             " outside [1, 2^24]");
  return h;
}

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

namespace {

// Elias-gamma code of level + 1 followed by the sign bit when level > 0, as one LSB-first
// field: the decoder's table (below) and the encoder agree on this layout.
struct EliasSymbol {
  uint32_t code;  // without the sign bit
  uint8_t width;  // with the sign bit
};
inline EliasSymbol EliasCode(uint32_t level) {
  const uint32_t v = level + 1;
  const int z = 31 - __builtin_clz(v);
  const uint64_t code = (1ull | (static_cast<uint64_t>(v & ((1u << z) - 1)) << 1)) << z;
  return {static_cast<uint32_t>(code), static_cast<uint8_t>(2 * z + 1 + (level > 0))};
}

// Decoding table over the next kTableBits bits of the stream: level, sign and total width of
// the symbol that starts there, or width 0 when the symbol is longer. 12 bits (16 KiB, in L1)
// cover levels up to 62, so s = 16 never leaves the table.
constexpr int kTableBits = 12;
struct EliasEntry {
  uint16_t level;
  uint8_t neg;
  uint8_t width;
};
const EliasEntry* EliasTable() {
  static const std::vector<EliasEntry> table = [] {
    std::vector<EliasEntry> t(1 << kTableBits, EliasEntry{0, 0, 0});
    for (uint32_t level = 0; level < 256; ++level) {
      const EliasSymbol sym = EliasCode(level);
      if (sym.width > kTableBits) break;
      for (uint32_t neg = 0; neg <= (level > 0 ? 1u : 0u); ++neg) {
        const uint32_t bits = sym.code | (neg << (sym.width - 1));
        // Every window whose low `width` bits are this symbol.
        for (uint32_t high = 0; high < (1u << (kTableBits - sym.width)); ++high) {
          t[bits | (high << sym.width)] = {static_cast<uint16_t>(level), static_cast<uint8_t>(neg),
                                           sym.width};
        }
      }
    }
    return t;
  }();
  return table.data();
}

// Stochastic rounding of |v| * scale for len elements, eight xorshift32 lanes at a time
// (vectorised): level = min(s, floor(r) + [u < frac(r)]), u uniform in [0, 1) with 24 bits.
// Writes level | neg << 16, where neg = 1 for a negative element with a non-zero level.
void RoundLevels(const float* v, int64_t len, float scale, int32_t s, uint32_t* state,
                 uint32_t* sym) {
  uint32_t st[8];
  std::memcpy(st, state, sizeof(st));
  int64_t i = 0;
#ifdef __SSE2__
  __m128i lane[2] = {_mm_loadu_si128(reinterpret_cast<const __m128i*>(st)),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(st + 4))};
  const __m128 vscale = _mm_set1_ps(scale), inv24 = _mm_set1_ps(0x1.0p-24f);
  const __m128 abs_mask = _mm_castsi128_ps(_mm_set1_epi32(0x7FFFFFFF));
  const __m128i vs = _mm_set1_epi32(s), zero = _mm_setzero_si128();
  for (; i + 8 <= len; i += 8) {
    for (int h = 0; h < 2; ++h) {
      __m128i x = lane[h];
      x = _mm_xor_si128(x, _mm_slli_epi32(x, 13));
      x = _mm_xor_si128(x, _mm_srli_epi32(x, 17));
      x = _mm_xor_si128(x, _mm_slli_epi32(x, 5));
      lane[h] = x;
      const __m128 u = _mm_mul_ps(_mm_cvtepi32_ps(_mm_srli_epi32(x, 8)), inv24);
      const __m128 val = _mm_loadu_ps(v + i + 4 * h);
      const __m128 r = _mm_mul_ps(_mm_and_ps(val, abs_mask), vscale);
      __m128i l = _mm_cvttps_epi32(r);
      const __m128 up = _mm_cmplt_ps(u, _mm_sub_ps(r, _mm_cvtepi32_ps(l)));  // all ones: +1
      l = _mm_sub_epi32(l, _mm_castps_si128(up));
      const __m128i over = _mm_cmpgt_epi32(l, vs);
      l = _mm_or_si128(_mm_andnot_si128(over, l), _mm_and_si128(over, vs));
      const __m128i neg = _mm_and_si128(_mm_srli_epi32(_mm_castps_si128(val), 31),
                                        _mm_srli_epi32(_mm_cmpgt_epi32(l, zero), 31));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(sym + i + 4 * h),
                       _mm_or_si128(l, _mm_slli_epi32(neg, 16)));
    }
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(st), lane[0]);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(st + 4), lane[1]);
#endif
  for (int j = 0; i < len; ++i, j = (j + 1) % 8) {
    uint32_t x = st[j];
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    st[j] = x;
    const float u = static_cast<float>(static_cast<int32_t>(x >> 8)) * 0x1.0p-24f;
    const float r = std::fabs(v[i]) * scale;
    auto l = static_cast<int32_t>(r);
    l = std::min(l + (u < r - static_cast<float>(l) ? 1 : 0), s);
    sym[i] = static_cast<uint32_t>(l) | static_cast<uint32_t>(l > 0 && v[i] < 0.f) << 16;
  }
  std::memcpy(state, st, sizeof(st));
}

// Elias symbols with their sign bit for levels below 255, indexed by level | neg << 8.
const EliasSymbol* EliasCodes() {
  static const std::vector<EliasSymbol> codes = [] {
    std::vector<EliasSymbol> c(512, EliasSymbol{0, 0});
    for (uint32_t l = 0; l < 255; ++l) {
      c[l] = EliasCode(l);
      c[l | 256] = {c[l].code | (l > 0 ? 1u << (c[l].width - 1) : 0u), c[l].width};
    }
    return c;
  }();
  return codes.data();
}

}  // namespace

void QsgdCompressor::EncodeTo(const float* in, int64_t n, const StepContext&, std::string* out) {
  const uint32_t s_levels = levels_, bucket = bucket_;
  const bool elias = elias_, max_norm = max_norm_;
  const int64_t nb = (n + bucket - 1) / bucket;
  const int b = LevelBits(s_levels);
  ByteWriter w(out);
  w.Put<uint8_t>((elias ? kElias : 0) | (max_norm ? kMaxNorm : 0));
  w.Put<uint16_t>(static_cast<uint16_t>(s_levels));
  w.Put<uint32_t>(bucket);
  // Upper bound on bits per element: fixed b + 1; gamma(s + 1) + sign = 2 floor(log2(s+1)) + 2.
  const int max_bits = elias ? 2 * (31 - __builtin_clz(s_levels + 1)) + 2 : b + 1;
  const size_t cap = (static_cast<size_t>(n) * max_bits + 7) / 8 + 8;
  const size_t norms_at = out->size();
  const size_t start = norms_at + static_cast<size_t>(nb) * sizeof(float);
  out->resize(start + cap);
  std::vector<float> norms(nb);
  BitWriter bits(out->data() + start, cap);
  uint32_t lanes[8];
  for (auto& x : lanes) x = static_cast<uint32_t>(rng_.Next() >> 32) | 1u;
  const EliasSymbol* codes = EliasCodes();
  const float s = static_cast<float>(s_levels);
  std::vector<uint32_t> sym(std::min<int64_t>(bucket, n));
  for (int64_t k = 0; k < nb; ++k) {
    const float* v = in + k * bucket;
    const int64_t len = std::min<int64_t>(bucket, n - k * bucket);
    double norm = 0.0;
    if (max_norm) {
      float m = 0.f, nan_probe = 0.f;  // v - v is NaN for NaN and Inf elements
      for (int64_t i = 0; i < len; ++i) {
        m = std::max(m, std::fabs(v[i]));
        nan_probe += v[i] - v[i];
      }
      norm = m + nan_probe;
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
    RoundLevels(v, len, scale, static_cast<int32_t>(s_levels), lanes, sym.data());
    if (!elias) {
      for (int64_t i = 0; i < len; ++i) {
        bits.Put((sym[i] & 0xFFFF) | (sym[i] >> 16) << b, b + 1);
      }
    } else if (s_levels < 255) {
      for (int64_t i = 0; i < len; ++i) {
        const EliasSymbol e = codes[(sym[i] & 0xFF) | (sym[i] >> 8)];
        bits.Put(e.code, e.width);
      }
    } else {
      for (int64_t i = 0; i < len; ++i) {
        const uint32_t l = sym[i] & 0xFFFF;
        bits.PutGamma(l + 1);
        if (l) bits.Put(sym[i] >> 16, 1);
      }
    }
  }
  if (!norms.empty())  // norms.data() may be null for an empty tensor
    std::memcpy(out->data() + norms_at, norms.data(), norms.size() * sizeof(float));
  out->resize(start + bits.Finish());
}

void QsgdCompressor::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  ByteReader r(bytes, "qsgd");
  const QsgdHeader h = ReadQsgdHeader(r);
  const uint32_t s = h.levels, bucket = h.bucket;
  const int64_t nb = (n + bucket - 1) / bucket;
  std::string_view raw_norms = r.GetBytes(static_cast<size_t>(nb) * sizeof(float), "norms");
  const bool elias = h.elias();
  const int b = LevelBits(s);
  std::string_view stream = r.Rest();
  if (!elias) {
    const size_t expect = (static_cast<size_t>(n) * (b + 1) + 7) / 8;
    GP_ENFORCE(stream.size() == expect, "qsgd: bit stream has ", stream.size(), " bytes, expected ",
               expect);
  }
  const EliasEntry* table = elias ? EliasTable() : nullptr;
  BitReader bits(stream, "qsgd");
  for (int64_t k = 0; k < nb; ++k) {
    float norm;
    std::memcpy(&norm, raw_norms.data() + k * sizeof(float), sizeof(float));
    GP_ENFORCE(std::isfinite(norm) && norm >= 0.f, "qsgd: bucket ", k, " has norm ", norm);
    const float unit = norm / static_cast<float>(s);
    const float signed_unit[2] = {unit, -unit};  // branch-free sign: the sign is a coin flip
    const int64_t begin = k * bucket, end = std::min<int64_t>(n, begin + bucket);
    uint32_t max_level = 0;
    if (!elias) {
      const uint32_t mask = (1u << b) - 1;
      for (int64_t i = begin; i < end; ++i) {
        const uint32_t sym = bits.Get(b + 1);
        max_level = std::max(max_level, sym & mask);
        out[i] = static_cast<float>(sym & mask) * signed_unit[sym >> b];
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        const EliasEntry e = table[bits.Peek(kTableBits)];
        uint32_t level, neg;
        if (e.width) {
          bits.Skip(e.width);
          level = e.level;
          neg = e.neg;
        } else {
          level = bits.GetGamma() - 1;
          neg = level ? bits.Get(1) : 0;
        }
        max_level = std::max(max_level, level);
        out[i] = static_cast<float>(level) * signed_unit[neg];
      }
    }
    GP_ENFORCE(max_level <= s, "qsgd: level ", max_level, " exceeds s=", s, " in bucket ", k);
  }
  bits.ExpectEnd();
}

}  // namespace gradpress::compressors
