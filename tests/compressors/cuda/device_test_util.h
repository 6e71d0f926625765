#pragma once
// Codec runs of the GPU codec tests (device_*_test.cc): the sizes and seeded inputs they use,
// codecs by shorthand, and encode / decode through the public API (device_codec.h) next to the
// CPU codecs, which define the wire formats and are the reference. The device buffers and the
// stream are in device_test_buffers.h, the comparisons in device_test_compare.h.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "common/codec_spec.h"
#include "compressors/compressor.h"
#include "compressors/cuda/device_codec.h"
#include "compressors/registry.h"
#include "tests/compressors/cuda/device_test_buffers.h"

namespace gradpress::compressors::cuda::testing {

// Sizes of the conformance runs: empty, tiny, not multiples of any bucket, and 1M.
inline const std::vector<int64_t>& TestSizes() {
  static const std::vector<int64_t> sizes = {0, 1, 7, 1000, 4099, 100003, 1 << 20};
  return sizes;
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

}  // namespace gradpress::compressors::cuda::testing
