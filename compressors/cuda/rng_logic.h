#pragma once
// The random streams of the GPU codecs (GP_HD, device_logic.h): rng.h's xorshift64*
// (terngrad, randomk, the samplers) and qsgd's eight xorshift32 lanes, and their jump-ahead.
// The streams are linear maps over GF(2), so a thread jumps to draw number d of a stream with
// a table of the map's powers M^(2^i) (JumpTable64 / JumpTable32, built on the host), and every
// thread reproduces exactly the draws the CPU codec makes in its sequential loop.
//
// Thread-safety: pure functions; the host tables are built once, thread-safely (static init).
#include <cstdint>
#include <vector>

#include "compressors/cuda/device_logic.h"

namespace gradpress::compressors::cuda {

// ---- xorshift64* (rng.h's Rng) --------------------------------------------------------

// One state transition of Rng::Next (the output is Xorshift64Out of the new state).
GP_HD uint64_t Xorshift64Step(uint64_t s) {
  s ^= s >> 12;
  s ^= s << 25;
  s ^= s >> 27;
  return s;
}
GP_HD uint64_t Xorshift64Out(uint64_t s) { return s * 0x2545F4914F6CDD1Dull; }
// Rng::Uniform of a draw r = Xorshift64Out(state).
GP_HD float UniformOf(uint64_t r) { return static_cast<float>(r >> 40) * 0x1.0p-24f; }
GP_HD uint64_t MulHi64(uint64_t a, uint64_t b) {
#if defined(__CUDA_ARCH__)
  return __umul64hi(a, b);
#else
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) >> 64);
#endif
}
// Rng::Below(bound) of a draw r.
GP_HD uint64_t BelowOf(uint64_t r, uint64_t bound) { return MulHi64(r, bound); }

// ---- qsgd's xorshift32 lanes (qsgd.cc RoundLevels) ------------------------------------

GP_HD uint32_t Xorshift32Step(uint32_t x) {
  x ^= x << 13;
  x ^= x >> 17;
  x ^= x << 5;
  return x;
}
// The uniform qsgd draws from a lane's new state x.
GP_HD float LaneUniform(uint32_t x) {
  return static_cast<float>(static_cast<int32_t>(x >> 8)) * 0x1.0p-24f;
}

// ---- jump-ahead over GF(2) -------------------------------------------------------------

// Powers M^(2^i), i < kJumpBits, of a stream's transition matrix, as column vectors:
// table[i * W + b] = M^(2^i) applied to the unit vector of bit b (W = 64 or 32).
constexpr int kJumpBits = 48;
constexpr int kJumpTable64Size = kJumpBits * 64;
constexpr int kJumpTable32Size = kJumpBits * 32;

GP_HD uint64_t ApplyColumns64(const uint64_t* cols, uint64_t v) {
  uint64_t r = 0;
  for (int b = 0; b < 64; ++b) r ^= cols[b] & (0 - ((v >> b) & 1));
  return r;
}
GP_HD uint32_t ApplyColumns32(const uint32_t* cols, uint32_t v) {
  uint32_t r = 0;
  for (int b = 0; b < 32; ++b) r ^= cols[b] & (0u - ((v >> b) & 1u));
  return r;
}
// The state `steps` transitions after `state` (steps < 2^kJumpBits).
GP_HD uint64_t Advance64(const uint64_t* table, uint64_t state, uint64_t steps) {
  for (int i = 0; steps != 0; ++i, steps >>= 1)
    if (steps & 1) state = ApplyColumns64(table + i * 64, state);
  return state;
}
GP_HD uint32_t Advance32(const uint32_t* table, uint32_t state, uint64_t steps) {
  for (int i = 0; steps != 0; ++i, steps >>= 1)
    if (steps & 1) state = ApplyColumns32(table + i * 32, state);
  return state;
}

// Fills table[kJumpTable64Size] for xorshift64 (host; the device gets a copy).
inline void BuildJumpTable64(uint64_t* table) {
  for (int b = 0; b < 64; ++b) table[b] = Xorshift64Step(uint64_t{1} << b);
  for (int i = 1; i < kJumpBits; ++i) {
    const uint64_t* prev = table + (i - 1) * 64;
    for (int b = 0; b < 64; ++b) table[i * 64 + b] = ApplyColumns64(prev, prev[b]);
  }
}
inline void BuildJumpTable32(uint32_t* table) {
  for (int b = 0; b < 32; ++b) table[b] = Xorshift32Step(1u << b);
  for (int i = 1; i < kJumpBits; ++i) {
    const uint32_t* prev = table + (i - 1) * 32;
    for (int b = 0; b < 32; ++b) table[i * 32 + b] = ApplyColumns32(prev, prev[b]);
  }
}

// The tables themselves, built once per process on the host (kernels get a device copy:
// device_parts.h's DeviceJumpTable64/32; host twins and tests use these).
inline const uint64_t* HostJumpTable64() {
  static const std::vector<uint64_t> table = [] {
    std::vector<uint64_t> t(kJumpTable64Size);
    BuildJumpTable64(t.data());
    return t;
  }();
  return table.data();
}
inline const uint32_t* HostJumpTable32() {
  static const std::vector<uint32_t> table = [] {
    std::vector<uint32_t> t(kJumpTable32Size);
    BuildJumpTable32(t.data());
    return t;
  }();
  return table.data();
}

}  // namespace gradpress::compressors::cuda
