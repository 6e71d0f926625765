#pragma once
// What the device quantizers' logic shares (GP_HD, device_logic.h): bitwise float helpers, so
// that host and device agree on NaN and signed zero, and the bit streams of qsgd, terngrad and
// onebit. Each codec's own logic is in quantizer_deterministic_logic.h (fp16, int8, onebit) or
// quantizer_stochastic_logic.h (qsgd, terngrad); as there, every float expression is the CPU
// codec's, in its order, so a kernel that calls these for each of its thread indices writes
// the CPU codec's bytes, and the host twins in tests/compressors/cuda/ check it.
// Thread-safety: pure functions.
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

}  // namespace gradpress::compressors::cuda
