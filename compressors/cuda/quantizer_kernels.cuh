#pragma once
// What the device quantizers' .cu files share (quantizers.cu, quantizer_qsgd.cu,
// quantizer_terngrad.cu, quantizer_onebit.cu): the per-codec factories MakeDeviceQuantizer
// dispatches to, launch sizing (momentum_correction.cu's too), and the device helpers every
// decode kernel uses. nvcc only. Thread-safety: free functions.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "compressors/cuda/device_parts.h"

namespace gradpress::compressors::cuda {

std::unique_ptr<DeviceQuantizer> MakeDeviceQsgd(ParamReader& r);
std::unique_ptr<DeviceQuantizer> MakeDeviceTernGrad(ParamReader& r);
std::unique_ptr<DeviceQuantizer> MakeDeviceOneBit(ParamReader& r);

constexpr int kBlockThreads = 256;

// Grid-stride kernels stop growing the grid at eight blocks of kBlockThreads per SM of the
// current device (the most that can be resident); each thread then loops over elements.
inline int64_t GridStrideCap() {
  int device = 0, sms = 0;
  CheckCuda(cudaGetDevice(&device), "cudaGetDevice");
  CheckCuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
            "cudaDeviceGetAttribute(multiProcessorCount)");
  return 8 * static_cast<int64_t>(std::max(sms, 1));
}

// Blocks for `items` work items at `per_block` items each: at least 1 (a kernel launched for
// n = 0 still writes its header), at most `cap`.
inline unsigned BlocksFor(int64_t items, int64_t per_block, int64_t cap) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, cap)));
}

// The grid of a grid-stride kernel over n elements, kBlockThreads a block.
inline unsigned GridFor(int64_t n) { return BlocksFor(n, kBlockThreads, GridStrideCap()); }

// Quantizers of at least kSliceMinElements elements encode and decode in about kSlices
// slices, so that the codec's payload copies overlap the next slice's kernels (PayloadSlice).
constexpr int64_t kSliceMinElements = int64_t{1} << 20;
constexpr int64_t kSlices = 8;

// How many units (buckets, elements) a slice takes of `total`: all of them for small tensors,
// else about total / kSlices rounded up to a multiple of `align` (> 0).
inline int64_t SliceStep(int64_t n, int64_t total, int64_t align) {
  if (n < kSliceMinElements) return std::max<int64_t>(total, 1);
  const int64_t step = (total + kSlices - 1) / kSlices;
  return std::max<int64_t>((step + align - 1) / align * align, 1);
}

// The first error wins; nullptr (SubtractDecodedAsync on a payload this codec wrote) skips.
__device__ __forceinline__ void RecordError(int* err, int code) {
  if (err != nullptr) atomicCAS(err, 0, code);
}

// Decode kernels either store D(payload) or subtract it in place (error feedback's e -= D).
template <bool kSubtract>
__device__ __forceinline__ void Emit(float* out, int64_t i, float v) {
  if (kSubtract) {
    out[i] -= v;
  } else {
    out[i] = v;
  }
}

inline cudaStream_t AsCuda(Stream stream) { return reinterpret_cast<cudaStream_t>(stream); }

}  // namespace gradpress::compressors::cuda
