// onebit on the device (onebit.h's wire format), byte for byte the CPU codec's payload.
//
// Eight threads per bucket: thread j sums lane j of the bucket (elements j, j + 8, ... of the
// full groups of eight, and thread 0 the tail) in float, in order, as onebit.cc's eight
// vector lanes do; the group then adds the eight lanes in double in order j = 0..7, so the
// scales round exactly as on the CPU. The same pass writes the sign bits: the thread that
// reads element 8m writes sign byte m. A bucket's sums are sequential by definition (float
// addition does not reassociate), so a very large bucket_size is slow on the GPU: one group
// walks bucket_size / 8 elements per thread.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/cuda/quantizer_kernels.cuh"
#include "compressors/cuda/quantizer_logic.h"

namespace gradpress::compressors::cuda {
namespace {

constexpr int64_t kMaxBucket = int64_t{1} << 30;  // onebit.cc's limit

__device__ __forceinline__ void OneBitElement(const float* in, int64_t n, int64_t e,
                                              OneBitLane* lane, uint8_t* signs) {
  OneBitAdd(lane, in[e]);
  if ((e & 7) == 0) signs[e >> 3] = SignByte(in, n, e >> 3);
}

__global__ void OneBitEncodeKernel(const float* in, int64_t n, uint32_t bucket, bool two_means,
                                   uint8_t* out, int* err) {
  const int per = two_means ? 2 : 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  uint8_t* scales = out + 5;
  uint8_t* signs = scales + 4 * per * nb;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = two_means ? 1 : 0;
    StoreU32(out + 1, bucket);
  }
  const int j = threadIdx.x % 8;
  const int lane_base = (threadIdx.x % 32) & ~7;  // the group's first lane in its warp
  const int64_t kb = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 8;
  const int64_t first = kb * bucket;
  const int64_t len = kb < nb ? min(static_cast<int64_t>(bucket), n - first) : 0;
  const int64_t full = len - len % 8;
  OneBitLane lane;
  for (int64_t i = j; i < full; i += 8) OneBitElement(in, n, first + i, &lane, signs);
  if (j == 0)
    for (int64_t i = full; i < len; ++i) OneBitElement(in, n, first + i, &lane, signs);
  OneBitTotals totals;  // every lane of the warp takes part in the shuffles
  for (int q = 0; q < 8; ++q) {
    OneBitLane other;
    other.pos = __shfl_sync(0xFFFFFFFFu, lane.pos, lane_base + q);
    other.neg = __shfl_sync(0xFFFFFFFFu, lane.neg, lane_base + q);
    other.npos = __shfl_sync(0xFFFFFFFFu, lane.npos, lane_base + q);
    other.nans = __shfl_sync(0xFFFFFFFFu, lane.nans, lane_base + q);
    OneBitCombine(&totals, other);
  }
  if (j != 0 || len == 0) return;
  if (OneBitBad(totals)) RecordError(err, kNonFiniteInput);
  float scale[2];
  OneBitScales(totals, len, two_means, scale);
  StoreF32(scales + 4 * per * kb, scale[0]);
  if (two_means) StoreF32(scales + 4 * (2 * kb + 1), scale[1]);
}

template <bool kSubtract>
__global__ void OneBitDecodeKernel(const uint8_t* payload, int64_t n, uint32_t bucket,
                                   bool two_means, float* out, int* err) {
  const int per = two_means ? 2 : 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  const uint8_t* scales = payload + 5;
  const uint8_t* signs = scales + 4 * per * nb;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid == 0 && n > 0 && !PaddingClear(signs[(n + 7) / 8 - 1], static_cast<uint64_t>(n)))
    RecordError(err, kPaddingBits);
  for (int64_t i = tid; i < n; i += stride) {
    const uint64_t k = static_cast<uint32_t>(i) / bucket;  // n < 2^31
    const float p = LoadF32(scales + 4 * per * k);
    const float q = two_means ? LoadF32(scales + 4 * (2 * k + 1)) : p;
    if (!(FiniteF(p) && FiniteF(q) && p >= 0.f && q >= 0.f)) RecordError(err, kBadScale);
    const bool negative = (signs[i >> 3] >> (i & 7)) & 1;
    Emit<kSubtract>(out, i, negative ? -q : p);
  }
}

class OneBitQuantizer : public DeviceQuantizer {
 public:
  explicit OneBitQuantizer(ParamReader& r)
      : two_means_(r.Choice("scaling", "two_means", {"mean", "two_means"}) == "two_means"),
        bucket_(static_cast<uint32_t>(r.Int("bucket_size", 1024, 1, kMaxBucket))) {}
  std::string Name() const override { return "onebit"; }
  size_t EncodedBytes(int64_t n) const override { return Bytes(n, bucket_, two_means_); }

  void EncodeAsync(const float* in, int64_t n, const StepContext&, uint8_t* out, int* err,
                   Stream stream) override {
    GP_ENFORCE(n <= INT32_MAX, "onebit: ", n, " elements exceed the device codec's 2^31 - 1");
    const int64_t nb = (n + bucket_ - 1) / bucket_;
    OneBitEncodeKernel<<<BlocksFor(8 * nb, kBlockThreads, INT32_MAX), kBlockThreads, 0,
                         AsCuda(stream)>>>(in, n, bucket_, two_means_, out, err);
    CheckCuda(cudaGetLastError(), "onebit: encode kernel");
  }

  void DecodeAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n, float* out,
                   int* err, Stream stream) override {
    GP_ENFORCE(n <= INT32_MAX, "onebit: ", n, " elements exceed the device codec's 2^31 - 1");
    ByteReader r(host_bytes, "onebit");
    const auto mode = r.Get<uint8_t>("scaling");
    GP_ENFORCE(mode <= 1, "onebit: unknown scaling mode ", int{mode});
    const uint32_t bucket = r.Get<uint32_t>("bucket_size");
    GP_ENFORCE(bucket >= 1 && bucket <= kMaxBucket, "onebit: bucket_size ", bucket,
               " out of range");
    const size_t expect = Bytes(n, bucket, mode == 1);
    GP_ENFORCE(host_bytes.size() == expect, "onebit: payload has ", host_bytes.size(),
               " bytes, expected ", expect, " for ", n, " elements");
    if (n == 0) return;
    OneBitDecodeKernel<false>
        <<<BlocksFor(n, kBlockThreads, GridStrideCap()), kBlockThreads, 0, AsCuda(stream)>>>(
            dev_bytes, n, bucket, mode == 1, out, err);
    CheckCuda(cudaGetLastError(), "onebit: decode kernel");
  }

  void SubtractDecodedAsync(const uint8_t* dev_bytes, int64_t n, float* e, Stream stream) override {
    if (n == 0) return;
    OneBitDecodeKernel<true>
        <<<BlocksFor(n, kBlockThreads, GridStrideCap()), kBlockThreads, 0, AsCuda(stream)>>>(
            dev_bytes, n, bucket_, two_means_, e, nullptr);
    CheckCuda(cudaGetLastError(), "onebit: subtract kernel");
  }

 private:
  static size_t Bytes(int64_t n, uint32_t bucket, bool two_means) {
    const int64_t nb = (n + bucket - 1) / bucket;
    return static_cast<size_t>(5 + 4 * nb * (two_means ? 2 : 1) + (n + 7) / 8);
  }

  bool two_means_;
  uint32_t bucket_;
};

}  // namespace

std::unique_ptr<DeviceQuantizer> MakeDeviceOneBit(ParamReader& r) {
  return std::make_unique<OneBitQuantizer>(r);
}

}  // namespace gradpress::compressors::cuda
