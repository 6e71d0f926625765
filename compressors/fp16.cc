#include "compressors/fp16.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "common/byte_io.h"

namespace gradpress::compressors {

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t ax = x & 0x7FFFFFFFu;
  if (ax >= 0x7F800000u)
    return static_cast<uint16_t>(sign | 0x7C00u | (ax > 0x7F800000u ? 0x200u : 0u));
  if (ax >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds past 65504
  if (ax < 0x38800000u) {  // below 2^-14: a half subnormal, round(|f| * 2^24)
    float a;
    std::memcpy(&a, &ax, 4);
    return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 16777216.0f)));
  }
  ax += 0xC8000FFFu + ((ax >> 13) & 1u);  // exponent -112, round half to even
  return static_cast<uint16_t>(sign | (ax >> 13));
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu, mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    const float v = static_cast<float>(mant) * 0x1.0p-24f;  // subnormal or zero
    std::memcpy(&bits, &v, 4);
    bits |= sign;
  } else if (exp == 31) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

namespace {
const float* HalfTable() {
  static const std::vector<float> table = [] {
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) t[h] = HalfToFloat(static_cast<uint16_t>(h));
    return t;
  }();
  return table.data();
}
}  // namespace

void Fp16Compressor::EncodeTo(const float* in, int64_t n, const StepContext&, std::string* out) {
  // Written with memcpy: after a sparsifier's indices the values may be unaligned.
  char* dst = ByteWriter(out).Extend(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToHalf(in[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void Fp16Compressor::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  ByteReader r(bytes, "fp16");
  std::string_view raw = r.GetBytes(static_cast<size_t>(n) * 2, "float16 values");
  r.ExpectEnd();
  const float* table = HalfTable();
  const auto* src = reinterpret_cast<const unsigned char*>(raw.data());
  for (int64_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    out[i] = table[h];
  }
}

}  // namespace gradpress::compressors
