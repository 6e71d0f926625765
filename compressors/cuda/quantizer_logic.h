#pragma once
// The per-element and per-bucket logic of the device quantizers (quantizers.cu,
// quantizer_qsgd.cu, quantizer_terngrad.cu, quantizer_onebit.cu), shared with their host
// twins in tests/compressors/cuda/: every float expression is the CPU codec's, in its order
// (fp16.cc, int8.cc, qsgd.cc, terngrad.cc, onebit.cc), so a kernel that calls these for each
// of its thread indices writes the CPU codec's bytes. Kept apart from device_logic.h because
// only the quantizers use it. Thread-safety: pure functions.
#include <cmath>
#include <cstdint>

#include "compressors/cuda/device_logic.h"

namespace gradpress::compressors::cuda {

// ---- float helpers (bitwise, so host and device agree on NaN and signed zero) -----------

GP_HD float AbsF(float x) { return BitsFloat(FloatBits(x) & 0x7FFFFFFFu); }
GP_HD bool FiniteF(float x) { return (FloatBits(x) & 0x7F800000u) != 0x7F800000u; }
GP_HD bool FiniteD(double x) {
#if defined(__CUDA_ARCH__)
  const uint64_t u = static_cast<uint64_t>(__double_as_longlong(x));
#else
  uint64_t u;
  __builtin_memcpy(&u, &x, 8);
#endif
  return (u & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
}
// std::max(m, |v|) as the CPU loops write it: a NaN v leaves m unchanged.
GP_HD float MaxAbs(float m, float v) {
  const float a = AbsF(v);
  return m < a ? a : m;
}
// Round to nearest, ties to even (the CPU's std::nearbyint in the default rounding mode).
GP_HD float RoundHalfEven(float x) {
#if defined(__CUDA_ARCH__)
  return rintf(x);
#else
  return std::nearbyint(x);
#endif
}
GP_HD double SqrtD(double x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

// ---- bit streams (bit_pack.h: bit i is bit i % 8 of byte i / 8) ---------------------------

// The `width` (<= 32) bits at bit `pos`, reading only the bytes that hold them.
GP_HD uint32_t LoadBits(const uint8_t* stream, uint64_t pos, int width) {
  const uint64_t first = pos >> 3, last = (pos + width - 1) >> 3;
  uint64_t acc = 0;
  for (uint64_t k = first; k <= last; ++k)
    acc |= static_cast<uint64_t>(stream[k]) << (8 * (k - first));
  return static_cast<uint32_t>((acc >> (pos & 7)) & ((uint64_t{1} << width) - 1));
}
// Whether the bits past `total_bits` in the stream's last byte are zero.
GP_HD bool PaddingClear(uint8_t last_byte, uint64_t total_bits) {
  const int used = static_cast<int>(total_bits & 7);
  return used == 0 || (last_byte >> used) == 0;
}
// A field of `width` (<= 32) bits at bit `pos` of a stream held in 32-bit words (word w holds
// stream bits 32w..32w+31): the word index and the two words' shares. The kernels OR the
// shares in (atomically in shared memory); the host twins OR them in plain loops.
struct WordShares {
  uint64_t word;
  uint32_t lo, hi;  // OR lo into word, hi into word + 1 (hi is 0 when the field fits)
};
GP_HD WordShares ShareField(uint32_t value, uint64_t pos, int width) {
  const int shift = static_cast<int>(pos & 31);
  WordShares s{pos >> 5, value << shift, 0u};
  if (shift + width > 32) s.hi = value >> (32 - shift);  // shift > 0 here
  return s;
}
// Byte k of a stream held in 32-bit words.
GP_HD uint8_t WordByte(const uint32_t* words, uint64_t k) {
  return static_cast<uint8_t>(words[k >> 2] >> (8 * (k & 3)));
}

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

// ---- qsgd, fixed width (qsgd.cc) -------------------------------------------------------

// Encode layout (quantizer_qsgd.cu): a block of kQsgdGroups groups of eight threads takes
// kQsgdGroups * QsgdPerGroup(bucket) consecutive buckets, a group QsgdPerGroup(bucket) of them
// (so that a group has about kQsgdGroupElements elements to amortise its lanes' jumps).
constexpr int kQsgdGroups = 8;
constexpr uint32_t kQsgdGroupElements = 1024;
// A block's bit stream lives in shared memory: at most 8 * 4096 * 17 bits = 68 KiB.
constexpr uint32_t kQsgdMaxEncodeBucket = 4096;
GP_HD int QsgdPerGroup(uint32_t bucket) {
  return bucket >= kQsgdGroupElements ? 1 : static_cast<int>(kQsgdGroupElements / bucket);
}
// ceil(log2(s + 1)): the level field.
GP_HD int QsgdLevelBits(uint32_t s) {
  int b = 0;
  while ((uint64_t{1} << b) < static_cast<uint64_t>(s) + 1) ++b;
  return b;
}
// Draws lane j (0..7) makes in a bucket of len elements: element i uses lane i % 8.
GP_HD uint64_t QsgdLaneDraws(uint64_t len, int j) {
  return len / 8 + (static_cast<uint64_t>(j) < len % 8 ? 1 : 0);
}
GP_HD float QsgdSquareAdd(float acc, float v) { return acc + v * v; }
// The L2 norm from the eight lane sums, in double in order j = 0..7 (may be NaN or Inf).
GP_HD double QsgdL2Norm(const float acc[8]) {
  double norm = 0.0;
  for (int j = 0; j < 8; ++j) norm += acc[j];
  return SqrtD(norm);
}
GP_HD float QsgdScale(float norm, uint32_t s) {
  return norm > 0.f ? static_cast<float>(s) / norm : 0.f;
}
// The symbol of v (level | negative << b) from its lane's new state x. RoundLevels: r =
// |v| * scale, level = min(s, floor(r) + [u < r - floor(r)]). r > s (rounding) gives s as
// there; r = Inf or NaN (scale = Inf when a max norm is below s / FLT_MAX) gives s or 0 where
// the CPU's float-to-int conversion is undefined.
GP_HD uint32_t QsgdSymbol(float v, float scale, uint32_t s, int b, uint32_t x) {
  const float u = LaneUniform(x);
  const float r = AbsF(v) * scale;
  uint32_t level;
  if (!(r <= static_cast<float>(s))) {
    level = r > 0.f ? s : 0u;
  } else {
    const int32_t l = static_cast<int32_t>(r);
    const int32_t up = l + (u < r - static_cast<float>(l) ? 1 : 0);
    level = static_cast<uint32_t>(up < static_cast<int32_t>(s) ? up : static_cast<int32_t>(s));
  }
  return level | static_cast<uint32_t>(level > 0 && v < 0.f) << b;
}
GP_HD float QsgdValue(uint32_t sym, int b, float unit) {
  const float level = static_cast<float>(sym & ((1u << b) - 1));
  return level * ((sym >> b) ? -unit : unit);
}

// ---- terngrad (terngrad.cc) ------------------------------------------------------------

// Encode layout (quantizer_terngrad.cu): a thread takes kTernChunk consecutive elements, a
// warp 32 consecutive chunks, staged through a shared tile kTernPiece elements per thread at
// a time: in piece p, load q of lane `lane` moves the element at `offset` from the warp's first
// into tile[slot], and thread t reads its element t * kTernChunk + p * kTernPiece + m from
// tile[t * kTernTileStride + m]. Two runs of kTernPiece floats per load keep it coalesced.
constexpr int kTernChunk = 64;
constexpr int kTernPiece = 16;
constexpr int kTernTileStride = kTernPiece + 1;  // odd: the 32 readers hit 32 banks
struct StageSlot {
  int64_t offset;
  int slot;
};
GP_HD StageSlot TernStageSlot(int p, int q, int lane) {
  const int flat = q * 32 + lane;
  const int t = flat / kTernPiece, m = flat % kTernPiece;
  return {static_cast<int64_t>(t) * kTernChunk + p * kTernPiece + m, t * kTernTileStride + m};
}

GP_HD float TernInverse(float m) { return m > 0.f ? 1.f / m : 0.f; }
// 0, 1 = +s, 2 = -s for v with uniform u.
GP_HD uint32_t TernSymbol(float u, float v, float inv) {
  const uint32_t keep = u < AbsF(v) * inv ? 1u : 0u;
  return keep << (v < 0.f ? 1 : 0);
}
GP_HD float TernValue(uint32_t t, float s) { return t == 1 ? s : t == 2 ? -s : 0.f; }

// ---- xorshift64* jumps by warps --------------------------------------------------------

// A warp jumps one state together: lane l applies columns 2l and 2l + 1 of a power of the
// transition matrix, and the XOR over the 32 lanes is ApplyColumns64(cols, state).
GP_HD uint64_t JumpShare64(const uint64_t* cols, uint64_t state, int lane) {
  const int b = 2 * lane;
  return (cols[b] & (0 - ((state >> b) & 1))) ^ (cols[b + 1] & (0 - ((state >> (b + 1)) & 1)));
}
// Lane tables: cols[b * 32 + lane] is column b of M^(lane * chunk), so that lane `lane` of a
// warp whose first chunk starts at draw d reaches draw d + lane * chunk in one product.
constexpr int kLaneTable64Size = 64 * 32;
GP_HD uint64_t ApplyLaneColumns64(const uint64_t* cols, int lane, uint64_t v) {
  uint64_t r = 0;
  for (int b = 0; b < 64; ++b) r ^= cols[b * 32 + lane] & (0 - ((v >> b) & 1));
  return r;
}
inline void BuildLaneTable64(const uint64_t* jump_table, uint64_t chunk, uint64_t* cols) {
  for (int lane = 0; lane < 32; ++lane)
    for (int b = 0; b < 64; ++b)
      cols[b * 32 + lane] = Advance64(jump_table, uint64_t{1} << b, lane * chunk);
}

}  // namespace gradpress::compressors::cuda
