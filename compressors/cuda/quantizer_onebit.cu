// onebit on the device (onebit.h's wire format), byte for byte the CPU codec's payload.
//
// Eight threads per bucket: thread j sums lane j of the bucket (elements j, j + 8, ... of the
// full groups of eight, and thread 0 the tail) in float, in order, as onebit.cc's eight
// vector lanes do; the group then adds the eight lanes in double in order j = 0..7, so the
// scales round exactly as on the CPU. The same pass writes the sign bits (from a ballot when
// bucket_size is a multiple of 8, else the thread that reads element 8m writes sign byte m).
// Large tensors run in slices of whole buckets (PayloadSlice) so that copies overlap kernels. A
// bucket's sums are sequential by definition (float addition does not reassociate), so a very large
// bucket_size is slow on the GPU: one group walks bucket_size / 8 elements per thread.
#include <cuda_runtime.h>

#include <memory>
#include <string>
#include <vector>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/quantizer_deterministic_logic.h"
#include "compressors/cuda/quantizer_kernels.cuh"

namespace gradpress::compressors::cuda {
namespace {

constexpr int64_t kMaxBucket = int64_t{1} << 30;  // onebit.cc's limit

__device__ __forceinline__ void OneBitElement(const float* in, int64_t n, int64_t e,
                                              OneBitLane* lane, uint8_t* signs) {
  OneBitAdd(lane, in[e]);
  if ((e & 7) == 0) signs[e >> 3] = SignByte(in, n, e >> 3);
}

// Encodes buckets [kb_begin, kb_end) (the header too when kb_begin is 0). kAligned: bucket is a
// multiple of 8, so the eight lanes of a group hold the eight elements of one sign byte
// together and a ballot assembles it from registers (no second read of the input); the loads
// are issued kUnroll at a time to keep enough of them in flight.
template <bool kAligned>
__global__ void OneBitEncodeKernel(const float* in, int64_t n, uint32_t bucket, bool two_means,
                                   int64_t kb_begin, int64_t kb_end, uint8_t* out, int* err) {
  const int per = two_means ? 2 : 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  uint8_t* scales = out + 5;
  uint8_t* signs = scales + 4 * per * nb;
  if (kb_begin == 0 && blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = two_means ? 1 : 0;
    StoreU32(out + 1, bucket);
  }
  const int j = threadIdx.x % 8;
  const int lane_base = (threadIdx.x % 32) & ~7;  // the group's first lane in its warp
  const int64_t kb = kb_begin + (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 8;
  const int64_t first = kb * bucket;
  const int64_t len = kb < kb_end ? min(static_cast<int64_t>(bucket), n - first) : 0;
  const int64_t full = len - len % 8;
  OneBitLane lane;
  if (kAligned) {
    constexpr int kUnroll = 8;
    const int64_t groups = full / 8, rounds = bucket / 8;  // rounds: the same for the warp
    for (int64_t r0 = 0; r0 < rounds; r0 += kUnroll) {
      float x[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) x[u] = r0 + u < groups ? in[first + 8 * (r0 + u) + j] : 0.f;
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t r = r0 + u;
        if (r >= rounds) break;  // uniform across the warp: the ballot sees every lane
        const unsigned neg = __ballot_sync(0xFFFFFFFFu, r < groups && x[u] < 0.f);
        if (r < groups) {
          OneBitAdd(&lane, x[u]);
          if (j == 0) signs[(first >> 3) + r] = static_cast<uint8_t>(neg >> lane_base);
        }
      }
    }
  } else {
    for (int64_t i = j; i < full; i += 8) OneBitElement(in, n, first + i, &lane, signs);
  }
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

// Decodes elements [begin, end) of the payload's n.
template <bool kSubtract>
__global__ void OneBitDecodeKernel(const uint8_t* payload, int64_t n, uint32_t bucket,
                                   bool two_means, int64_t begin, int64_t end, float* out,
                                   int* err) {
  const int per = two_means ? 2 : 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  const uint8_t* scales = payload + 5;
  const uint8_t* signs = scales + 4 * per * nb;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid == 0 && end == n && n > 0 &&
      !PaddingClear(signs[(n + 7) / 8 - 1], static_cast<uint64_t>(n)))
    RecordError(err, kPaddingBits);
  for (int64_t i = begin + tid; i < end; i += stride) {
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
    EncodeBuckets(in, n, 0, (n + bucket_ - 1) / bucket_, out, err, stream);
  }

  std::vector<PayloadSlice> EncodeSlices(int64_t n) const override {
    return Slices(n, bucket_, two_means_);
  }

  void EncodeSlicedAsync(const float* in, int64_t n, const StepContext&, uint8_t* out, int* err,
                         Stream stream, const SliceHook& done) override {
    GP_ENFORCE(n <= INT32_MAX, "onebit: ", n, " elements exceed the device codec's 2^31 - 1");
    const std::vector<PayloadSlice> slices = Slices(n, bucket_, two_means_);
    for (size_t c = 0; c < slices.size(); ++c) {
      EncodeBuckets(in, n, slices[c].begin / bucket_, (slices[c].end + bucket_ - 1) / bucket_, out,
                    err, stream);
      done(c);
    }
  }

  void DecodeAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n, float* out,
                   int* err, Stream stream) override {
    bool two_means = false;
    const uint32_t bucket = Validate(host_bytes, n, &two_means);
    DecodeRange<false>(dev_bytes, n, bucket, two_means, 0, n, out, err, stream);
  }

  std::vector<PayloadSlice> DecodeSlices(std::string_view host_bytes, int64_t n) const override {
    bool two_means = false;
    const uint32_t bucket = Validate(host_bytes, n, &two_means);
    return Slices(n, bucket, two_means);
  }

  void DecodeSlicedAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n,
                         float* out, int* err, Stream stream, const SliceHook& ready) override {
    bool two_means = false;
    const uint32_t bucket = Validate(host_bytes, n, &two_means);
    const std::vector<PayloadSlice> slices = Slices(n, bucket, two_means);
    for (size_t c = 0; c < slices.size(); ++c) {
      ready(c);
      DecodeRange<false>(dev_bytes, n, bucket, two_means, slices[c].begin, slices[c].end, out, err,
                         stream);
    }
  }

  void SubtractDecodedAsync(const uint8_t* dev_bytes, int64_t n, float* e, Stream stream) override {
    DecodeRange<true>(dev_bytes, n, bucket_, two_means_, 0, n, e, nullptr, stream);
  }

 private:
  static size_t Bytes(int64_t n, uint32_t bucket, bool two_means) {
    const int64_t nb = (n + bucket - 1) / bucket;
    return static_cast<size_t>(5 + 4 * nb * (two_means ? 2 : 1) + (n + 7) / 8);
  }

  // Slices of whole buckets, a multiple of 8 of them (so that each starts on a sign byte):
  // slice c owns its buckets' scales (slice 0 the header too) and its elements' sign bytes.
  static std::vector<PayloadSlice> Slices(int64_t n, uint32_t bucket, bool two_means) {
    const int64_t nb = (n + bucket - 1) / bucket, per = two_means ? 2 : 1;
    const size_t signs = static_cast<size_t>(5 + 4 * per * nb);
    const int64_t step = SliceStep(n, nb, 8);
    std::vector<PayloadSlice> slices;
    for (int64_t kb0 = 0;; kb0 += step) {
      const int64_t kb1 = std::min(kb0 + step, nb);
      PayloadSlice s;
      s.begin = kb0 * bucket;
      s.end = std::min(kb1 * static_cast<int64_t>(bucket), n);
      s.offset[0] = kb0 == 0 ? 0 : static_cast<size_t>(5 + 4 * per * kb0);
      s.bytes[0] = static_cast<size_t>(5 + 4 * per * kb1) - s.offset[0];
      s.offset[1] = signs + static_cast<size_t>(s.begin / 8);
      s.bytes[1] = static_cast<size_t>((s.end + 7) / 8 - s.begin / 8);
      slices.push_back(s);
      if (kb1 >= nb) break;
    }
    return slices;
  }

  // The payload's header checked against n; returns its bucket size and scaling mode.
  static uint32_t Validate(std::string_view host_bytes, int64_t n, bool* two_means) {
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
    *two_means = mode == 1;
    return bucket;
  }

  void EncodeBuckets(const float* in, int64_t n, int64_t kb_begin, int64_t kb_end, uint8_t* out,
                     int* err, Stream stream) const {
    const unsigned grid = BlocksFor(8 * (kb_end - kb_begin), kBlockThreads, INT32_MAX);
    if (bucket_ % 8 == 0) {
      OneBitEncodeKernel<true><<<grid, kBlockThreads, 0, AsCuda(stream)>>>(
          in, n, bucket_, two_means_, kb_begin, kb_end, out, err);
    } else {
      OneBitEncodeKernel<false><<<grid, kBlockThreads, 0, AsCuda(stream)>>>(
          in, n, bucket_, two_means_, kb_begin, kb_end, out, err);
    }
    CheckCuda(cudaGetLastError(), "onebit: encode kernel");
  }

  template <bool kSubtract>
  static void DecodeRange(const uint8_t* dev_bytes, int64_t n, uint32_t bucket, bool two_means,
                          int64_t begin, int64_t end, float* out, int* err, Stream stream) {
    if (end <= begin) return;
    OneBitDecodeKernel<kSubtract>
        <<<BlocksFor(end - begin, kBlockThreads, GridStrideCap()), kBlockThreads, 0,
           AsCuda(stream)>>>(dev_bytes, n, bucket, two_means, begin, end, out, err);
    CheckCuda(cudaGetLastError(), kSubtract ? "onebit: subtract kernel" : "onebit: decode kernel");
  }

  bool two_means_;
  uint32_t bucket_;
};

}  // namespace

std::unique_ptr<DeviceQuantizer> MakeDeviceOneBit(ParamReader& r) {
  return std::make_unique<OneBitQuantizer>(r);
}

}  // namespace gradpress::compressors::cuda
