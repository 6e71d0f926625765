#pragma once
// The per-element and per-block logic of the GPU codecs, shared by the CUDA kernels and by
// their host instantiation (tests/compressors/cuda/): compiled by nvcc as __host__ __device__
// and by g++ as plain inline C++, with no CUDA header. Everything here is a pure function of
// its arguments, so a kernel is "call this for every thread index" and its host twin is a
// loop over the same indices; the host twin's payloads are compared byte for byte with the
// CPU codecs (compressors/*.cc), which define the wire formats.
//
// Random streams: rng.h's xorshift64* (terngrad, randomk, the samplers) and qsgd's eight
// xorshift32 lanes are linear maps over GF(2), so a thread jumps to draw number d of a stream
// with a table of the map's powers M^(2^i) (JumpTable64 / JumpTable32, built on the host),
// and every thread reproduces exactly the draws the CPU codec makes in its sequential loop.
//
// Float arithmetic must round as the host's does: the CUDA library is compiled with
// --fmad=false, so a*b+c is never contracted into an FMA on the device.
//
// Thread-safety: pure functions.
#include <cstdint>
#include <vector>

#if defined(__CUDACC__)
#define GP_HD __host__ __device__ __forceinline__
#else
#define GP_HD inline
#endif

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

// ---- byte formats ----------------------------------------------------------------------

// LEB128 length of v (byte_io.h's PutVarint).
GP_HD int VarintLength(uint64_t v) {
  int n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}
// Writes v as LEB128 at dst; returns the bytes written.
GP_HD int WriteVarint(uint64_t v, uint8_t* dst) {
  int n = 0;
  while (v >= 0x80) {
    dst[n++] = static_cast<uint8_t>((v & 0x7F) | 0x80);
    v >>= 7;
  }
  dst[n++] = static_cast<uint8_t>(v);
  return n;
}
// Little-endian stores at any alignment (payload fields follow variable-length headers).
GP_HD void StoreU32(uint8_t* dst, uint32_t v) {
  dst[0] = static_cast<uint8_t>(v);
  dst[1] = static_cast<uint8_t>(v >> 8);
  dst[2] = static_cast<uint8_t>(v >> 16);
  dst[3] = static_cast<uint8_t>(v >> 24);
}
GP_HD uint32_t LoadU32(const uint8_t* src) {
  return static_cast<uint32_t>(src[0]) | static_cast<uint32_t>(src[1]) << 8 |
         static_cast<uint32_t>(src[2]) << 16 | static_cast<uint32_t>(src[3]) << 24;
}
GP_HD uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  return u;
#endif
}
GP_HD float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
#endif
}
GP_HD void StoreF32(uint8_t* dst, float v) { StoreU32(dst, FloatBits(v)); }
GP_HD float LoadF32(const uint8_t* src) { return BitsFloat(LoadU32(src)); }

// ---- decode errors found on the device -------------------------------------------------

// A kernel that finds malformed payload content records the first code in a device word
// (atomicCAS from 0) and writes nothing out of range; the host throws InvalidArgument with
// DecodeErrorText(code) after the stream synchronises.
enum DecodeError : int {
  kDecodeOk = 0,
  kIndexOutOfRange = 1,  // an index >= numel
  kIndexOrder = 2,       // int32 indices not strictly increasing
  kGapOutOfRange = 3,    // a delta gap >= numel
  kVarintTooLong = 4,    // a varint longer than 10 bytes or over 64 bits
  kIndexCount = 5,       // the index bytes hold another number of varints than k
  kLevelAboveS = 6,      // a qsgd level above s
  kBadSymbol = 7,        // terngrad's symbol 3
  kBadScale = 8,         // a NaN, Inf or negative scale or norm
  kPaddingBits = 9,      // non-zero padding bits at the end of a bit stream
  kNonFiniteInput = 10,  // encode: NaN or Inf in the input (int8, qsgd, terngrad, onebit)
};
inline const char* DecodeErrorText(int code) {
  switch (code) {
    case kIndexOutOfRange:
      return "index out of range";
    case kIndexOrder:
      return "indices out of order";
    case kGapOutOfRange:
      return "index gap out of range";
    case kVarintTooLong:
      return "varint too long";
    case kIndexCount:
      return "index bytes do not hold k indices";
    case kLevelAboveS:
      return "level exceeds s";
    case kBadSymbol:
      return "invalid ternary symbol 3";
    case kBadScale:
      return "a scale or norm that is NaN, Inf or negative";
    case kPaddingBits:
      return "non-zero padding bits at the end of the bit stream";
    case kNonFiniteInput:
      return "input has a NaN or Inf element";
    default:
      return "malformed payload";
  }
}

}  // namespace gradpress::compressors::cuda
