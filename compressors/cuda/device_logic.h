#pragma once
// The shared logic of the GPU codecs, compiled for the CUDA kernels and for their host
// instantiation (tests/compressors/cuda/): by nvcc as __host__ __device__ (GP_HD) and by g++ as
// plain inline C++, with no CUDA header. Everything in these headers is a pure function of its
// arguments, so a kernel is "call this for every thread index" and its host twin is a loop over
// the same indices; the host twin's payloads are compared byte for byte with the CPU codecs
// (compressors/*.cc), which define the wire formats. This one holds GP_HD and the payloads' byte
// formats (varints, little-endian words, float bits); rng_logic.h the random streams,
// decode_error.h the decode errors, the *_logic.h headers each codec family's logic.
//
// Float arithmetic must round as the host's does: the CUDA library is compiled with
// --fmad=false, so a*b+c is never contracted into an FMA on the device.
//
// Thread-safety: pure functions.
#include <cstdint>

#if defined(__CUDACC__)
#define GP_HD __host__ __device__ __forceinline__
#else
#define GP_HD inline
#endif

namespace gradpress::compressors::cuda {

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

}  // namespace gradpress::compressors::cuda
