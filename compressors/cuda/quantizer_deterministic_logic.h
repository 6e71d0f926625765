#pragma once
// The per-element and per-bucket logic of the deterministic device quantizers: fp16 and int8
// (quantizers.cu) and onebit (quantizer_onebit.cu), shared with their host twins in
// tests/compressors/cuda/quantizer_logic_test.cc. Every float expression is the CPU codec's,
// in its order (fp16.cc, int8.cc, onebit.cc), so a kernel that calls these for each of its
// thread indices writes the CPU codec's bytes. Thread-safety: pure functions.
#include <cstdint>

#include "compressors/cuda/device_logic.h"
#include "compressors/cuda/quantizer_logic.h"

namespace gradpress::compressors::cuda {

// ---- fp16 (fp16.cc) --------------------------------------------------------------------

GP_HD uint16_t FloatToHalfBits(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u)
    return static_cast<uint16_t>(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (ax < 0x38800000u) {  // below 2^-14: a half subnormal, round(|f| * 2^24)
    const float scaled = BitsFloat(ax) * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(RoundHalfEven(scaled)));
  }
  ax += 0xC8000FFFu + ((ax >> 13) & 1u);  // exponent -112, round half to even
  return static_cast<uint16_t>(sign | (ax >> 13));
}
GP_HD float HalfBitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  if (exp == 0) return BitsFloat(FloatBits(static_cast<float>(mant) * 0x1.0p-24f) | sign);
  if (exp == 31) return BitsFloat(sign | 0x7F800000u | (mant << 13));
  return BitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

// ---- int8 (int8.cc) --------------------------------------------------------------------

// The CPU's min and max keep the first of equal elements, which matters only for the sign of
// a zero minimum or maximum (the header stores it). A reduction key orders by value, -0 as
// +0, then by index; the minimum key of MinKey (MaxKey) names the CPU's lo (hi) element.
GP_HD uint32_t OrderedBits(float x) {
  uint32_t u = FloatBits(x);
  if ((u & 0x7FFFFFFFu) == 0) u = 0;  // -0 ties with +0
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
GP_HD uint64_t MinKey(float x, uint32_t index) {
  return static_cast<uint64_t>(OrderedBits(x)) << 32 | index;
}
GP_HD uint64_t MaxKey(float x, uint32_t index) {
  return static_cast<uint64_t>(~OrderedBits(x)) << 32 | index;
}
GP_HD uint32_t KeyIndex(uint64_t key) { return static_cast<uint32_t>(key); }

GP_HD float Int8Scale(float lo, float hi) {
  // hi - lo may exceed FLT_MAX; the scale (at most 2 FLT_MAX / 255) may not.
  return static_cast<float>((static_cast<double>(hi) - lo) / 255.0);
}
GP_HD float Int8Inverse(float scale) { return scale > 0.f ? 1.f / scale : 0.f; }
// Whether x - lo may overflow float, so that levels are computed in double.
GP_HD bool Int8Wide(float lo, float hi) { return !FiniteF(hi - lo); }
GP_HD uint8_t Int8Level(float x, float lo, float inv, bool wide) {
  if (!wide) {
    const float v = (x - lo) * inv + 0.5f;
    const float low = 0.f < v ? v : 0.f;  // std::max(0.f, v): NaN -> 0
    return static_cast<uint8_t>(255.f < low ? 255.f : low);
  }
  const double v = (static_cast<double>(x) - lo) * inv + 0.5;
  const double low = 0.0 < v ? v : 0.0;
  return static_cast<uint8_t>(255.0 < low ? 255.0 : low);
}
// Decode: whether q * scale may overflow float (then in double).
GP_HD bool Int8WideDecode(float scale) { return !FiniteF(255.f * scale); }
GP_HD float Int8Value(float lo, float scale, uint8_t q, bool wide) {
  if (!wide) return lo + static_cast<float>(q) * scale;
  return static_cast<float>(lo + static_cast<double>(q) * scale);
}

// ---- onebit (onebit.cc) ----------------------------------------------------------------

// One of the eight float lanes of a bucket's sums: lane j takes elements j, j + 8, ... of
// the full groups of eight, lane 0 also the tail, each in order.
struct OneBitLane {
  float pos = 0.f, neg = 0.f;
  int32_t npos = 0, nans = 0;
};
GP_HD void OneBitAdd(OneBitLane* l, float x) {
  l->pos += x >= 0.f ? x : 0.f;
  l->neg += x < 0.f ? -x : 0.f;
  l->npos += x >= 0.f;
  l->nans += x != x;
}
// The lanes summed in double, j = 0..7 in order.
struct OneBitTotals {
  double pos = 0.0, neg = 0.0;
  int64_t npos = 0, nans = 0;
};
GP_HD void OneBitCombine(OneBitTotals* t, const OneBitLane& l) {
  t->pos += l.pos;
  t->neg += l.neg;
  t->npos += l.npos;
  t->nans += l.nans;
}
GP_HD bool OneBitBad(const OneBitTotals& t) {
  return t.nans != 0 || !FiniteD(t.pos) || !FiniteD(t.neg);
}
// The bucket's scales: two_means p (scale[0]) and q (scale[1]); mean a (scale[0]).
GP_HD void OneBitScales(const OneBitTotals& t, int64_t len, bool two_means, float scale[2]) {
  if (two_means) {
    scale[0] = t.npos ? static_cast<float>(t.pos / t.npos) : 0.f;
    scale[1] = len - t.npos ? static_cast<float>(t.neg / (len - t.npos)) : 0.f;
  } else {
    scale[0] = len ? static_cast<float>((t.pos + t.neg) / len) : 0.f;
    scale[1] = 0.f;
  }
}
// Sign byte `byte` of in[0..n): bit j = in[8 byte + j] < 0.
GP_HD uint8_t SignByte(const float* in, int64_t n, int64_t byte) {
  uint32_t bits = 0;
  for (int j = 0; j < 8 && 8 * byte + j < n; ++j)
    bits |= static_cast<uint32_t>(in[8 * byte + j] < 0.f) << j;
  return static_cast<uint8_t>(bits);
}

}  // namespace gradpress::compressors::cuda
