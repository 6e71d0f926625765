#pragma once
// The per-element and per-bucket logic of the seeded device quantizers, qsgd
// (quantizer_qsgd.cu, its eight xorshift32 lanes) and terngrad (quantizer_terngrad.cu, its
// xorshift64* stream jumped by warps), shared with their host twins in tests/compressors/cuda/
// (quantizer_qsgd_test.cc, quantizer_terngrad_test.cc). Every float expression is the CPU
// codec's, in its order (qsgd.cc, terngrad.cc), and every draw the CPU's, so a kernel that
// calls these for each of its thread indices writes the CPU codec's bytes.
// Thread-safety: pure functions.
#include <cstdint>

#include "compressors/cuda/device_logic.h"
#include "compressors/cuda/quantizer_logic.h"
#include "compressors/cuda/rng_logic.h"

namespace gradpress::compressors::cuda {

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
