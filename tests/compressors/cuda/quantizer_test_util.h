#pragma once
// Helpers for the host tests of the device quantizers' logic (quantizer_*logic.h): the CPU
// codecs that define the wire formats, and test vectors. No CUDA runtime.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/codec_spec.h"
#include "compressors/compressor_config.h"
#include "compressors/cuda/device_logic.h"
#include "compressors/rng.h"

namespace gradpress::compressors::cuda::testing {

// The CPU codec T built from a shorthand such as "qsgd elias=false levels=16".
template <typename T>
std::unique_ptr<T> MakeCpu(const std::string& shorthand) {
  const CodecSpec spec = ParseCodecShorthand(shorthand);
  ParamReader r(spec);
  auto codec = std::make_unique<T>(r);
  r.Finish();
  return codec;
}

template <typename T>
std::string CpuEncode(T* codec, const std::vector<float>& v) {
  std::string out;
  codec->EncodeTo(v.data(), static_cast<int64_t>(v.size()), StepContext{}, &out);
  return out;
}

// Records the first error code, as the kernels' atomicCAS(err, 0, code) does.
inline void Record(int* err, int code) {
  if (*err == 0) *err = code;
}

// Which special values a test vector mixes into its N(0, 0.01^2)-like body.
struct Mix {
  bool zeros = true;      // +0 and -0
  bool huge = false;      // +-1e15 (squares stay finite)
  bool tiny = false;      // subnormals and the smallest normals
  bool positive = false;  // |v| only
};

inline std::vector<float> Values(int64_t n, uint64_t seed, Mix mix = {}) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) {
    const float pick = rng.Uniform();
    float a, b;
    rng.Uniform2(&a, &b);
    // Box-Muller: deterministic on one host, and the twin reads the same vector anyway.
    x = 0.01f * std::sqrt(-2.f * std::log(a + 0x1.0p-25f)) * std::cos(6.2831853f * b);
    if (mix.zeros && pick < 0.08f) x = pick < 0.04f ? 0.f : -0.f;
    if (mix.huge && pick > 0.98f) x = pick > 0.99f ? 1e15f : -1e15f;
    if (mix.tiny && pick > 0.95f && pick <= 0.98f)
      x = pick > 0.965f ? 1e-40f * (1.f + b) : -1.2e-38f * (1.f + a);
    if (mix.positive) x = std::fabs(x);
  }
  return v;
}

inline uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Bitwise equality of two float vectors (NaN payloads and signed zeros included); the index
// of the first difference, or -1.
inline int64_t FirstBitDifference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (Bits(a[i]) != Bits(b[i])) return static_cast<int64_t>(i);
  return -1;
}

// The Rng state a codec's SaveState wrote (8 bytes, little endian).
inline uint64_t SavedRngState(const std::string& saved) {
  uint64_t s = 0;
  for (int i = 7; i >= 0; --i) s = s << 8 | static_cast<uint8_t>(saved.at(i));
  return s;
}

}  // namespace gradpress::compressors::cuda::testing
