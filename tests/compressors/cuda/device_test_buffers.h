#pragma once
// The CUDA side of the GPU codec tests (device_*_test.cc): the check of runtime calls, the
// stream every test runs on, device float buffers and the copies to and from them, and the
// sentinel and guard floats that show what a decode wrote.
//
// The stream is non-blocking on purpose: work a codec wrongly puts on the legacy default
// stream is then not ordered with ours, and the comparisons catch it.
#include <cuda_runtime.h>

#include <catch2/catch.hpp>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace gradpress::compressors::cuda::testing {

// Fails the test (REQUIRE) with the call and CUDA's message when a runtime call fails.
#define GP_CUDA_REQUIRE(call)                               \
  do {                                                      \
    const cudaError_t gp_cuda_rc_ = (call);                 \
    INFO(#call << ": " << cudaGetErrorString(gp_cuda_rc_)); \
    REQUIRE(gp_cuda_rc_ == cudaSuccess);                    \
  } while (0)

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

}  // namespace gradpress::compressors::cuda::testing
