// The device quantizers' factory (device_parts.h's MakeDeviceQuantizer) and the three
// deterministic element-wise ones: none (a device copy), fp16 (fp16.cc's bit arithmetic) and
// int8 (int8.cc: a min/max reduction, then one level per element). qsgd, terngrad and onebit
// live in quantizer_qsgd.cu, quantizer_terngrad.cu and quantizer_onebit.cu.
#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/quantizer_deterministic_logic.h"
#include "compressors/cuda/quantizer_kernels.cuh"

namespace gradpress::compressors::cuda {
namespace {

// ---- kernels ---------------------------------------------------------------------------

__global__ void Fp16EncodeKernel(const float* in, int64_t n, uint8_t* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const uint16_t h = FloatToHalfBits(in[i]);
    out[2 * i] = static_cast<uint8_t>(h);
    out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
}

template <bool kSubtract>
__global__ void Fp16DecodeKernel(const uint8_t* bytes, int64_t n, float* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const auto h = static_cast<uint16_t>(bytes[2 * i] | bytes[2 * i + 1] << 8);
    Emit<kSubtract>(out, i, HalfBitsToFloat(h));
  }
}

// none's SubtractDecoded: e[i] -= the payload's float i (any alignment).
__global__ void F32SubtractKernel(const uint8_t* bytes, int64_t n, float* e) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    e[i] -= LoadF32(bytes + 4 * i);
}

using Key = unsigned long long;  // atomicMin's type

__device__ __forceinline__ Key MinOf(Key a, Key b) { return b < a ? b : a; }

// keys[0] = min MinKey, keys[1] = min MaxKey over in[0..n) (keys preset to ~0); a NaN or Inf
// element records kNonFiniteInput (int8.cc refuses them).
__global__ void Int8ReduceKernel(const float* in, int64_t n, Key* keys, int* err) {
  Key lo = ~Key{0}, hi = ~Key{0};
  bool bad = false;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float x = in[i];
    lo = MinOf(lo, MinKey(x, static_cast<uint32_t>(i)));
    hi = MinOf(hi, MaxKey(x, static_cast<uint32_t>(i)));
    bad |= !FiniteF(x);
  }
  if (bad) RecordError(err, kNonFiniteInput);
  for (int off = 16; off > 0; off >>= 1) {
    lo = MinOf(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, off));
    hi = MinOf(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, off));
  }
  __shared__ Key warp_lo[kBlockThreads / 32], warp_hi[kBlockThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) {
    warp_lo[warp] = lo;
    warp_hi[warp] = hi;
  }
  __syncthreads();
  if (warp == 0) {
    const int warps = blockDim.x / 32;
    lo = lane < warps ? warp_lo[lane] : ~Key{0};
    hi = lane < warps ? warp_hi[lane] : ~Key{0};
    for (int off = 16; off > 0; off >>= 1) {
      lo = MinOf(lo, __shfl_xor_sync(0xFFFFFFFFu, lo, off));
      hi = MinOf(hi, __shfl_xor_sync(0xFFFFFFFFu, hi, off));
    }
    if (lane == 0) {
      atomicMin(&keys[0], lo);
      atomicMin(&keys[1], hi);
    }
  }
}

// Header (f32 lo, f32 scale) and one level per element, as int8.cc.
__global__ void Int8EncodeKernel(const float* in, int64_t n, const Key* keys, uint8_t* out) {
  float lo = 0.f, hi = 0.f;
  if (n > 0) {  // the keys' indices are < n: every element lowers both keys
    lo = in[KeyIndex(keys[0])];
    hi = in[KeyIndex(keys[1])];
  }
  const float scale = Int8Scale(lo, hi);
  const float inv = Int8Inverse(scale);
  const bool wide = Int8Wide(lo, hi);
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    StoreF32(out, lo);
    StoreF32(out + 4, scale);
  }
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[8 + i] = Int8Level(in[i], lo, inv, wide);
}

template <bool kSubtract>
__global__ void Int8DecodeKernel(const uint8_t* bytes, int64_t n, float* out) {
  const float lo = LoadF32(bytes), scale = LoadF32(bytes + 4);
  const bool wide = Int8WideDecode(scale);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    Emit<kSubtract>(out, i, Int8Value(lo, scale, bytes[8 + i], wide));
}

// ---- quantizers ------------------------------------------------------------------------

void ExpectSize(std::string_view bytes, size_t expect, const char* codec, int64_t n) {
  GP_ENFORCE(bytes.size() == expect, codec, ": payload has ", bytes.size(), " bytes, expected ",
             expect, " for ", n, " elements");
}

class NoneQuantizer : public DeviceQuantizer {
 public:
  std::string Name() const override { return "none"; }
  size_t EncodedBytes(int64_t n) const override { return static_cast<size_t>(n) * 4; }
  void EncodeAsync(const float* in, int64_t n, const StepContext&, uint8_t* out, int*,
                   Stream stream) override {
    if (n == 0) return;
    CheckCuda(cudaMemcpyAsync(out, in, EncodedBytes(n), cudaMemcpyDeviceToDevice, AsCuda(stream)),
              "none: cudaMemcpyAsync (encode)");
  }
  void DecodeAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n, float* out,
                   int*, Stream stream) override {
    ExpectSize(host_bytes, EncodedBytes(n), "none", n);
    if (n == 0) return;
    CheckCuda(
        cudaMemcpyAsync(out, dev_bytes, EncodedBytes(n), cudaMemcpyDeviceToDevice, AsCuda(stream)),
        "none: cudaMemcpyAsync (decode)");
  }
  void SubtractDecodedAsync(const uint8_t* dev_bytes, int64_t n, float* e, Stream stream) override {
    if (n == 0) return;
    F32SubtractKernel<<<GridFor(n), kBlockThreads, 0, AsCuda(stream)>>>(dev_bytes, n, e);
    CheckCuda(cudaGetLastError(), "none: subtract kernel");
  }
};

class Fp16Quantizer : public DeviceQuantizer {
 public:
  std::string Name() const override { return "fp16"; }
  size_t EncodedBytes(int64_t n) const override { return static_cast<size_t>(n) * 2; }
  void EncodeAsync(const float* in, int64_t n, const StepContext&, uint8_t* out, int*,
                   Stream stream) override {
    if (n == 0) return;
    Fp16EncodeKernel<<<GridFor(n), kBlockThreads, 0, AsCuda(stream)>>>(in, n, out);
    CheckCuda(cudaGetLastError(), "fp16: encode kernel");
  }
  void DecodeAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n, float* out,
                   int*, Stream stream) override {
    ExpectSize(host_bytes, EncodedBytes(n), "fp16", n);  // every 16-bit pattern decodes
    if (n == 0) return;
    Fp16DecodeKernel<false><<<GridFor(n), kBlockThreads, 0, AsCuda(stream)>>>(dev_bytes, n, out);
    CheckCuda(cudaGetLastError(), "fp16: decode kernel");
  }
  void SubtractDecodedAsync(const uint8_t* dev_bytes, int64_t n, float* e, Stream stream) override {
    if (n == 0) return;
    Fp16DecodeKernel<true><<<GridFor(n), kBlockThreads, 0, AsCuda(stream)>>>(dev_bytes, n, e);
    CheckCuda(cudaGetLastError(), "fp16: subtract kernel");
  }
};

class Int8Quantizer : public DeviceQuantizer {
 public:
  std::string Name() const override { return "int8"; }
  size_t EncodedBytes(int64_t n) const override { return 8 + static_cast<size_t>(n); }
  void EncodeAsync(const float* in, int64_t n, const StepContext&, uint8_t* out, int* err,
                   Stream stream) override {
    GP_ENFORCE(n <= INT32_MAX, "int8: ", n, " elements exceed the device codec's 2^31 - 1");
    Key* keys = keys_.as<Key>(2);
    const unsigned grid = GridFor(n);
    if (n > 0) {
      CheckCuda(cudaMemsetAsync(keys, 0xFF, 2 * sizeof(Key), AsCuda(stream)),
                "int8: cudaMemsetAsync");
      Int8ReduceKernel<<<grid, kBlockThreads, 0, AsCuda(stream)>>>(in, n, keys, err);
      CheckCuda(cudaGetLastError(), "int8: reduce kernel");
    }
    Int8EncodeKernel<<<grid, kBlockThreads, 0, AsCuda(stream)>>>(in, n, keys, out);
    CheckCuda(cudaGetLastError(), "int8: encode kernel");
  }
  void DecodeAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n, float* out,
                   int*, Stream stream) override {
    ByteReader r(host_bytes, "int8");
    const auto lo = r.Get<float>("min");
    const auto scale = r.Get<float>("scale");
    GP_ENFORCE(FiniteF(lo) && FiniteF(scale) && scale >= 0.f,
               "int8: min and scale must be finite and scale >= 0 (min=", lo, ", scale=", scale,
               ")");
    ExpectSize(host_bytes, EncodedBytes(n), "int8", n);  // every level byte decodes
    if (n == 0) return;
    Int8DecodeKernel<false><<<GridFor(n), kBlockThreads, 0, AsCuda(stream)>>>(dev_bytes, n, out);
    CheckCuda(cudaGetLastError(), "int8: decode kernel");
  }
  void SubtractDecodedAsync(const uint8_t* dev_bytes, int64_t n, float* e, Stream stream) override {
    if (n == 0) return;
    Int8DecodeKernel<true><<<GridFor(n), kBlockThreads, 0, AsCuda(stream)>>>(dev_bytes, n, e);
    CheckCuda(cudaGetLastError(), "int8: subtract kernel");
  }

 private:
  DeviceBytes keys_;  // the reduction's two keys
};

}  // namespace

std::unique_ptr<DeviceQuantizer> MakeDeviceQuantizer(const std::string& name, ParamReader& r) {
  // The same parameters as the CPU constructors (none, fp16 and int8 take none).
  if (name == "none") return std::make_unique<NoneQuantizer>();
  if (name == "fp16") return std::make_unique<Fp16Quantizer>();
  if (name == "int8") return std::make_unique<Int8Quantizer>();
  if (name == "qsgd") return MakeDeviceQsgd(r);
  if (name == "terngrad") return MakeDeviceTernGrad(r);
  if (name == "onebit") return MakeDeviceOneBit(r);
  return nullptr;
}

}  // namespace gradpress::compressors::cuda
