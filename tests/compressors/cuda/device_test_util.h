#pragma once
// Helpers of the GPU codec tests (device_*_test.cc): device buffers, the stream every test
// runs on, seeded inputs, and encode / decode through the public API (device_codec.h) next to
// the CPU codecs, which define the wire formats and are the reference.
//
// The stream is non-blocking on purpose: work a codec wrongly puts on the legacy default
// stream is then not ordered with ours, and the comparisons catch it.
#include <cuda_runtime.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/codec_spec.h"
#include "compressors/compressor.h"
#include "compressors/cuda/device_codec.h"
#include "compressors/registry.h"

namespace gradpress::compressors::cuda::testing {

// Fails the test (REQUIRE) with the call and CUDA's message when a runtime call fails.
#define GP_CUDA_REQUIRE(call)                               \
  do {                                                      \
    const cudaError_t gp_cuda_rc_ = (call);                 \
    INFO(#call << ": " << cudaGetErrorString(gp_cuda_rc_)); \
    REQUIRE(gp_cuda_rc_ == cudaSuccess);                    \
  } while (0)

// Sizes of the conformance runs: empty, tiny, not multiples of any bucket, and 1M.
inline const std::vector<int64_t>& TestSizes() {
  static const std::vector<int64_t> sizes = {0, 1, 7, 1000, 4099, 100003, 1 << 20};
  return sizes;
}

// One stream per process, created on first use and kept until the process ends.
inline cudaStream_t TestStream() {
  static cudaStream_t stream = nullptr;
  if (stream == nullptr) GP_CUDA_REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream;
}

// The bytes every device buffer is filled with before a decode: an element a decode leaves
// unwritten reads as 0xA5A5A5A5 (a float no codec produces from these inputs), and the guard
// floats after out[n) must still hold it afterwards (a decode never writes out of range).
constexpr int kSentinelByte = 0xA5;
constexpr int64_t kGuardFloats = 64;

// cudaMalloc'd floats, freed on destruction; no allocation for an empty buffer.
class DeviceFloats {
 public:
  explicit DeviceFloats(int64_t n) : n_(n) {
    if (n > 0) GP_CUDA_REQUIRE(cudaMalloc(&data_, static_cast<size_t>(n) * sizeof(float)));
  }
  ~DeviceFloats() {
    if (data_ != nullptr) cudaFree(data_);
  }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* data() { return data_; }
  int64_t size() const { return n_; }

 private:
  float* data_ = nullptr;
  int64_t n_ = 0;
};

inline void Upload(const std::vector<float>& x, float* dst) {
  if (x.empty()) return;
  GP_CUDA_REQUIRE(cudaMemcpyAsync(dst, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice,
                                  TestStream()));
  GP_CUDA_REQUIRE(cudaStreamSynchronize(TestStream()));
}

inline std::vector<float> Download(const float* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  if (n == 0) return out;
  GP_CUDA_REQUIRE(cudaMemcpyAsync(out.data(), src, out.size() * sizeof(float),
                                  cudaMemcpyDeviceToHost, TestStream()));
  GP_CUDA_REQUIRE(cudaStreamSynchronize(TestStream()));
  return out;
}

// Seeded N(0, 0.01^2) floats (gradient-like), generated on the host.
inline std::vector<float> Gaussian(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.f, 0.01f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(gen);
  return x;
}

inline CodecSpec Spec(const std::string& shorthand) {
  RegisterBuiltinCompressors();
  return ParseCodecShorthand(shorthand);
}

// The CPU codec whose payloads the GPU's must equal byte for byte: the same spec with every
// qsgd fixed-width (elias=false), the variant the GPU always writes.
inline CodecSpec CpuTwin(const std::string& shorthand) {
  CodecSpec s = Spec(shorthand);
  if (s.codec == "qsgd") s.params["elias"] = "false";
  if (s.then && s.then->codec == "qsgd") {
    auto then = std::make_shared<CodecSpec>(*s.then);  // shared by copies: replace, never edit
    then->params["elias"] = "false";
    s.then = then;
  }
  return s;
}

inline std::unique_ptr<DeviceCodec> Gpu(const std::string& shorthand) {
  return MakeDeviceCodec(Spec(shorthand));
}
inline std::unique_ptr<Compressor> Cpu(const CodecSpec& spec) { return MakeCompressor(spec); }

// The payload one reused pinned buffer receives from a device encode of x.
inline std::string GpuEncode(DeviceCodec& codec, const std::vector<float>& x,
                             const StepContext& ctx) {
  // Never freed: a static's destructor would run after the CUDA runtime has shut down.
  static PinnedBytes* pinned = new PinnedBytes;
  DeviceFloats in(static_cast<int64_t>(x.size()));
  Upload(x, in.data());
  codec.Encode(in.data(), static_cast<int64_t>(x.size()), ctx, pinned, TestStream());
  return std::string(pinned->view());
}

inline std::string CpuEncode(Compressor& codec, const std::vector<float>& x,
                             const StepContext& ctx) {
  std::string out;
  codec.EncodeTo(x.data(), static_cast<int64_t>(x.size()), ctx, &out);
  return out;
}

// Decodes on the device into a sentinel-filled buffer with guard floats; checks the guard.
inline std::vector<float> GpuDecode(DeviceCodec& decoder, std::string_view bytes, int64_t n) {
  DeviceFloats out(n + kGuardFloats);
  const size_t all = static_cast<size_t>(n + kGuardFloats) * sizeof(float);
  GP_CUDA_REQUIRE(cudaMemsetAsync(out.data(), kSentinelByte, all, TestStream()));
  struct GuardCheck {  // also when Decode throws: a refused payload writes nothing out of range
    DeviceFloats& out;
    int64_t n;
    ~GuardCheck() {
      std::vector<float> guard(kGuardFloats);
      if (cudaMemcpyAsync(guard.data(), out.data() + n, kGuardFloats * sizeof(float),
                          cudaMemcpyDeviceToHost, TestStream()) != cudaSuccess ||
          cudaStreamSynchronize(TestStream()) != cudaSuccess) {
        FAIL_CHECK("reading the guard floats after a decode failed");
        return;
      }
      std::vector<unsigned char> want(guard.size() * sizeof(float), kSentinelByte);
      CHECK(std::memcmp(guard.data(), want.data(), want.size()) == 0);
    }
  } guard_check{out, n};
  decoder.Decode(bytes, n, out.data(), TestStream());
  return Download(out.data(), n);
}

inline std::vector<float> CpuDecode(const std::string& name, std::string_view bytes, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  MakeDecoder(name)->DecodeTo(bytes, n, out.data());
  return out;
}

// "" when a and b hold the same floats (+0 equals -0, any two NaNs count as equal), else where
// they differ: CHECK(Mismatch(a, b) == "") then prints a line, not a million floats.
inline std::string Mismatch(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) {
    return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size());
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i]))) continue;
    char buf[160];
    std::snprintf(buf, sizeof(buf), "element %zu of %zu: %.9g and %.9g", i, a.size(), a[i], b[i]);
    return buf;
  }
  return "";
}

// "" when two payloads are the same bytes, else their sizes and first differing byte.
inline std::string PayloadMismatch(std::string_view a, std::string_view b) {
  if (a == b) return "";
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  auto byte = [](std::string_view s, size_t at) {
    return at < s.size() ? std::to_string(static_cast<uint8_t>(s[at])) : std::string("end");
  };
  return "sizes " + std::to_string(a.size()) + " and " + std::to_string(b.size()) +
         ", first difference at byte " + std::to_string(i) + " (" + byte(a, i) + " and " +
         byte(b, i) + ")";
}

// True when the k-th and (k+1)-th largest magnitudes are equal (topk's bytes then depend on
// the tie rule, which another test covers).
inline bool TieAtKth(const std::vector<float>& x, int64_t k) {
  if (k <= 0 || k >= static_cast<int64_t>(x.size())) return false;
  std::vector<float> mags(x.size());
  for (size_t i = 0; i < x.size(); ++i) mags[i] = std::fabs(x[i]);
  std::nth_element(mags.begin(), mags.begin() + k, mags.end(), std::greater<float>());
  const float next = mags[k];
  const float kth = *std::min_element(mags.begin(), mags.begin() + k);
  return kth == next && next != 0.f;
}

inline std::string SaveState(const DeviceCodec& c) {
  std::string s;
  c.SaveState(&s);
  return s;
}
inline std::string SaveState(const Compressor& c) {
  std::string s;
  c.SaveState(&s);
  return s;
}

}  // namespace gradpress::compressors::cuda::testing
