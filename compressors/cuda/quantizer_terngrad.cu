// terngrad on the device (terngrad.h's wire format), byte for byte the CPU codec's payload for
// the same Rng state: element i uses draw i + 1 of the codec's xorshift64* stream.
//
// Each thread takes a chunk of kChunk consecutive elements (kChunk / 4 whole bytes of 2-bit
// symbols), a warp 32 consecutive chunks. A warp jumps the stream to its first element
// together (each lane applies two columns of a jump matrix, the XOR over the warp is the
// product), then each lane applies its lane table (M^(lane * kChunk)) once and steps through
// its chunk. The chunks are staged through shared memory kPiece elements at a time so that
// global loads stay coalesced although each thread walks its own run. Two passes: the bucket
// maxima (max |v|, NaN skipped as std::max does in terngrad.cc), then the symbols.
// Like the CPU codec, an Inf element is refused (kNonFiniteInput) and a NaN one encodes as 0.
#include <cuda_runtime.h>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/quantizer_kernels.cuh"
#include "compressors/cuda/quantizer_stochastic_logic.h"
#include "compressors/cuda/rng_logic.h"
#include "compressors/rng.h"

namespace gradpress::compressors::cuda {
namespace {

constexpr int kChunk = kTernChunk;  // elements per thread
constexpr int kPiece = kTernPiece;  // elements per thread staged at a time
constexpr int kWarps = kBlockThreads / 32;
constexpr int kTileStride = kTernTileStride;

// Stages piece p of the warp's 32 chunks (TernStageSlot): thread t then finds its element
// warp_first + t * kChunk + p * kPiece + m at tile[t * kTileStride + m] (0 past n).
__device__ __forceinline__ void StagePiece(float* tile, const float* in, int64_t n,
                                           int64_t warp_first, int p, int lane) {
  for (int q = 0; q < kPiece; ++q) {
    const StageSlot s = TernStageSlot(p, q, lane);
    const int64_t e = warp_first + s.offset;
    tile[s.slot] = e < n ? in[e] : 0.f;
  }
  __syncwarp();
}

// maxima[k] (zeroed) = bits of max |v| over bucket k; a warp inside one bucket reduces first.
__global__ void __launch_bounds__(kBlockThreads, 4)
    TernMaxKernel(const float* in, int64_t n, int64_t bucket, uint32_t* maxima) {
  __shared__ float tiles[kWarps][32 * kTileStride];
  const int lane = threadIdx.x % 32;
  float* tile = tiles[threadIdx.x / 32];
  const int64_t warp_first =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32 * (32 * kChunk);
  const int64_t start = warp_first + static_cast<int64_t>(lane) * kChunk;
  const int64_t warp_last = min(warp_first + 32 * kChunk, n) - 1;
  const bool one_bucket = warp_first < n && warp_first / bucket == warp_last / bucket;
  int64_t k = start / bucket;
  int64_t boundary = (k + 1) * bucket;
  float m = 0.f;
  for (int p = 0; p < kChunk / kPiece; ++p) {
    StagePiece(tile, in, n, warp_first, p, lane);
    for (int q = 0; q < kPiece; ++q) {
      const int64_t i = start + p * kPiece + q;
      if (i >= n) break;
      if (i == boundary) {  // never inside a one-bucket warp
        atomicMax(&maxima[k], FloatBits(m));
        ++k;
        boundary += bucket;
        m = 0.f;
      }
      m = MaxAbs(m, tile[lane * kTileStride + q]);
    }
    __syncwarp();  // the tile is restaged next
  }
  if (one_bucket) {                                                     // uniform across the warp
    const uint32_t top = __reduce_max_sync(0xFFFFFFFFu, FloatBits(m));  // m >= 0: bits order
    if (lane == 0) atomicMax(&maxima[warp_first / bucket], top);
  } else if (start < n) {
    atomicMax(&maxima[k], FloatBits(m));
  }
}

__global__ void __launch_bounds__(kBlockThreads, 4)
    TernEncodeKernel(const float* in, int64_t n, int64_t bucket, const uint32_t* maxima,
                     uint64_t state0, const uint64_t* jump, const uint64_t* lane_cols,
                     int64_t begin, int64_t end, uint8_t* out, int* err) {
  __shared__ float tiles[kWarps][32 * kTileStride];
  const int lane = threadIdx.x % 32;
  float* tile = tiles[threadIdx.x / 32];
  const int64_t nb = (n + bucket - 1) / bucket;
  uint8_t* scales = out + 4;
  uint8_t* stream = scales + 4 * nb;
  if (begin == 0 && blockIdx.x == 0 && threadIdx.x == 0)
    StoreU32(out, static_cast<uint32_t>(bucket));
  // Elements [begin, end) only (begin and end multiples of 4 or end == n: whole bytes).
  const int64_t warp_first =
      begin + (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32 * (32 * kChunk);
  if (warp_first >= end) return;  // the whole warp: nothing below needs it
  const int64_t start = warp_first + static_cast<int64_t>(lane) * kChunk;
  // The warp's state after warp_first draws, together; then this lane's chunk start.
  uint64_t state = state0;
  int power = 0;
  for (uint64_t steps = static_cast<uint64_t>(warp_first); steps != 0; steps >>= 1, ++power) {
    if (steps & 1) {
      uint64_t share = JumpShare64(jump + power * 64, state, lane);
      for (int off = 16; off > 0; off >>= 1) share ^= __shfl_xor_sync(0xFFFFFFFFu, share, off);
      state = share;
    }
  }
  state = ApplyLaneColumns64(lane_cols, lane, state);
  int64_t k = start / bucket;
  int64_t boundary = (k + 1) * bucket;
  float m = start < end ? BitsFloat(maxima[k]) : 0.f;
  float inv = TernInverse(m);
  uint32_t byte = 0;
  for (int p = 0; p < kChunk / kPiece; ++p) {
    StagePiece(tile, in, end, warp_first, p, lane);
    for (int q = 0; q < kPiece; ++q) {
      const int64_t i = start + p * kPiece + q;
      if (i >= end) break;
      if (i == boundary) {
        ++k;
        boundary += bucket;
        m = BitsFloat(maxima[k]);
        inv = TernInverse(m);
      }
      if (i == boundary - bucket) {  // the bucket's first element writes its scale
        StoreF32(scales + 4 * k, m);
        if (!FiniteF(m)) RecordError(err, kNonFiniteInput);
      }
      state = Xorshift64Step(state);
      const float u = UniformOf(Xorshift64Out(state));
      byte |= TernSymbol(u, tile[lane * kTileStride + q], inv) << (2 * (i & 3));
      if ((i & 3) == 3 || i == end - 1) {  // chunks start on a byte: each byte has one writer
        stream[i >> 2] = static_cast<uint8_t>(byte);
        byte = 0;
      }
    }
    __syncwarp();
  }
}

template <bool kSubtract>
__global__ void TernDecodeKernel(const uint8_t* payload, int64_t n, uint32_t bucket, int64_t begin,
                                 int64_t end, float* out, int* err) {
  const int64_t nb = (n + bucket - 1) / bucket;
  const uint8_t* scales = payload + 4;
  const uint8_t* stream = scales + 4 * nb;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid == 0 && end == n && n > 0) {
    const uint64_t bits = 2 * static_cast<uint64_t>(n);
    if (!PaddingClear(stream[(bits + 7) / 8 - 1], bits)) RecordError(err, kPaddingBits);
  }
  for (int64_t i = begin + tid; i < end; i += stride) {
    const uint32_t k = static_cast<uint32_t>(i) / bucket;  // n < 2^31
    const float s = LoadF32(scales + 4 * static_cast<uint64_t>(k));
    if (!(FiniteF(s) && s >= 0.f)) RecordError(err, kBadScale);
    const uint32_t t = (stream[i >> 2] >> (2 * (i & 3))) & 3u;
    if (t == 3) RecordError(err, kBadSymbol);
    Emit<kSubtract>(out, i, TernValue(t, s));
  }
}

class TernGradQuantizer : public DeviceQuantizer {
 public:
  explicit TernGradQuantizer(ParamReader& r)
      : bucket_(r.Int("bucket_size", 0, 0, std::numeric_limits<uint32_t>::max())),
        rng_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))) {}
  std::string Name() const override { return "terngrad"; }
  size_t EncodedBytes(int64_t n) const override { return Bytes(n, BucketFor(n)); }

  void EncodeAsync(const float* in, int64_t n, const StepContext& ctx, uint8_t* out, int* err,
                   Stream stream) override {
    EncodeSlicedAsync(in, n, ctx, out, err, stream, [](size_t) {});
  }

  std::vector<PayloadSlice> EncodeSlices(int64_t n) const override {
    return Slices(n, BucketFor(n));
  }

  // The bucket maxima over the whole tensor first, then the symbols slice by slice.
  void EncodeSlicedAsync(const float* in, int64_t n, const StepContext&, uint8_t* out, int* err,
                         Stream stream, const SliceHook& done) override {
    GP_ENFORCE(n <= INT32_MAX, "terngrad: ", n, " elements exceed the device codec's 2^31 - 1");
    const int64_t bucket = BucketFor(n), nb = (n + bucket - 1) / bucket;
    const uint64_t* lane_cols = LaneTable(stream);
    uint32_t* maxima = maxima_.as<uint32_t>(static_cast<size_t>(std::max<int64_t>(nb, 1)));
    if (n > 0) {
      CheckCuda(cudaMemsetAsync(maxima, 0, nb * sizeof(uint32_t), AsCuda(stream)),
                "terngrad: cudaMemsetAsync");
      const unsigned grid = BlocksFor((n + kChunk - 1) / kChunk, kBlockThreads, INT32_MAX);
      TernMaxKernel<<<grid, kBlockThreads, 0, AsCuda(stream)>>>(in, n, bucket, maxima);
      CheckCuda(cudaGetLastError(), "terngrad: max kernel");
    }
    const std::vector<PayloadSlice> slices = Slices(n, bucket);
    for (size_t c = 0; c < slices.size(); ++c) {
      const int64_t begin = slices[c].begin, end = slices[c].end;
      const unsigned grid =
          BlocksFor((end - begin + kChunk - 1) / kChunk, kBlockThreads, INT32_MAX);
      TernEncodeKernel<<<grid, kBlockThreads, 0, AsCuda(stream)>>>(
          in, n, bucket, maxima, rng_.state(), DeviceJumpTable64(), lane_cols, begin, end, out,
          err);
      CheckCuda(cudaGetLastError(), "terngrad: encode kernel");
      done(c);
    }
    rng_.set_state(Advance64(HostJumpTable64(), rng_.state(), static_cast<uint64_t>(n)));
  }

  void DecodeAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n, float* out,
                   int* err, Stream stream) override {
    DecodeSlicedAsync(host_bytes, dev_bytes, n, out, err, stream, [](size_t) {});
  }

  std::vector<PayloadSlice> DecodeSlices(std::string_view host_bytes, int64_t n) const override {
    return Slices(n, Validate(host_bytes, n));
  }

  void DecodeSlicedAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n,
                         float* out, int* err, Stream stream, const SliceHook& ready) override {
    const uint32_t bucket = Validate(host_bytes, n);
    const std::vector<PayloadSlice> slices = Slices(n, bucket);
    for (size_t c = 0; c < slices.size(); ++c) {
      ready(c);
      DecodeRange<false>(dev_bytes, n, bucket, slices[c].begin, slices[c].end, out, err, stream);
    }
  }

  void SubtractDecodedAsync(const uint8_t* dev_bytes, int64_t n, float* e, Stream stream) override {
    const auto bucket = static_cast<uint32_t>(BucketFor(n));
    DecodeRange<true>(dev_bytes, n, bucket, 0, n, e, nullptr, stream);
  }

  void SaveState(std::string* out) const override { SaveRngState(rng_, out); }
  void LoadState(std::string_view in) override { LoadRngState(in, "terngrad", &rng_); }

 private:
  int64_t BucketFor(int64_t n) const { return std::max<int64_t>(1, bucket_ ? bucket_ : n); }
  static size_t Bytes(int64_t n, int64_t bucket) {
    const int64_t nb = (n + bucket - 1) / bucket;
    return static_cast<size_t>(4 + 4 * nb + (2 * n + 7) / 8);
  }
  // Slices of whole warps' runs (so whole bytes of symbols): slice [b, e) owns the scales of
  // the buckets that start in it (slice 0 the header too) and its elements' symbol bytes. A
  // decode slice also reads the scale of a bucket begun earlier, which an earlier slice owns.
  static std::vector<PayloadSlice> Slices(int64_t n, int64_t bucket) {
    const int64_t nb = (n + bucket - 1) / bucket;
    const size_t symbols = static_cast<size_t>(4 + 4 * nb);
    const int64_t step = SliceStep(n, n, 32 * kChunk);
    std::vector<PayloadSlice> slices;
    for (int64_t b = 0;; b += step) {
      PayloadSlice s;
      s.begin = b;
      s.end = std::min(b + step, n);
      const int64_t k0 = (b + bucket - 1) / bucket, k1 = (s.end + bucket - 1) / bucket;
      s.offset[0] = b == 0 ? 0 : static_cast<size_t>(4 + 4 * k0);
      s.bytes[0] = static_cast<size_t>(4 + 4 * k1) - s.offset[0];
      s.offset[1] = symbols + static_cast<size_t>(b / 4);
      s.bytes[1] = static_cast<size_t>((2 * s.end + 7) / 8 - b / 4);
      slices.push_back(s);
      if (s.end >= n) break;
    }
    return slices;
  }
  // The payload's header checked against n; returns its bucket size.
  static uint32_t Validate(std::string_view host_bytes, int64_t n) {
    GP_ENFORCE(n <= INT32_MAX, "terngrad: ", n, " elements exceed the device codec's 2^31 - 1");
    ByteReader r(host_bytes, "terngrad");
    const uint32_t bucket = r.Get<uint32_t>("bucket_size");
    GP_ENFORCE(bucket >= 1, "terngrad: bucket_size must be at least 1");
    const size_t expect = Bytes(n, bucket);
    GP_ENFORCE(host_bytes.size() == expect, "terngrad: payload has ", host_bytes.size(),
               " bytes, expected ", expect, " for ", n, " elements");
    return bucket;
  }
  template <bool kSubtract>
  static void DecodeRange(const uint8_t* dev_bytes, int64_t n, uint32_t bucket, int64_t begin,
                          int64_t end, float* out, int* err, Stream stream) {
    if (end <= begin) return;
    TernDecodeKernel<kSubtract>
        <<<BlocksFor(end - begin, kBlockThreads, GridStrideCap()), kBlockThreads, 0,
           AsCuda(stream)>>>(dev_bytes, n, bucket, begin, end, out, err);
    CheckCuda(cudaGetLastError(),
              kSubtract ? "terngrad: subtract kernel" : "terngrad: decode kernel");
  }
  // The lane table on the device, uploaded at the first encode (the host copy is static, so
  // the asynchronous copy may outlive this call).
  const uint64_t* LaneTable(Stream stream) {
    static const std::vector<uint64_t> host = [] {
      std::vector<uint64_t> cols(kLaneTable64Size);
      BuildLaneTable64(HostJumpTable64(), kChunk, cols.data());
      return cols;
    }();
    if (!lane_table_ready_) {
      CheckCuda(
          cudaMemcpyAsync(lane_table_.as<uint64_t>(host.size()), host.data(),
                          host.size() * sizeof(uint64_t), cudaMemcpyHostToDevice, AsCuda(stream)),
          "terngrad: cudaMemcpyAsync (lane table)");
      lane_table_ready_ = true;
    }
    return reinterpret_cast<const uint64_t*>(lane_table_.data());
  }

  int64_t bucket_;  // 0 = the whole tensor
  Rng rng_;
  DeviceBytes maxima_;      // per bucket: bits of max |v|
  DeviceBytes lane_table_;  // kLaneTable64Size columns
  bool lane_table_ready_ = false;
};

}  // namespace

std::unique_ptr<DeviceQuantizer> MakeDeviceTernGrad(ParamReader& r) {
  return std::make_unique<TernGradQuantizer>(r);
}

}  // namespace gradpress::compressors::cuda
