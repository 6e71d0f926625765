// qsgd on the device (qsgd.h's wire format, fixed-width variant). The GPU always writes
// elias=false payloads (flags bit 0 clear), whatever the `elias` parameter says: the
// parameter is accepted so that the CPU's YAML works unchanged, and the payload is the one
// the CPU codec writes with `qsgd elias=false` and the same RNG state, byte for byte.
// Decode takes both variants: fixed width on the device; an Elias-coded payload (from a CPU
// worker) is decoded on the host by the CPU codec, copied up, and the stream synchronised.
//
// Encode layout: a block of kGroups groups of eight threads takes kGroups * per_group
// consecutive buckets (per_group = max(1, kQsgdGroupElements / bucket_size)); thread j of a group
// is xorshift32 lane j. It jumps its lane once to the group's first bucket (Advance32), then
// for each bucket sums its lane of squares (or max |v|), the group combines the eight lanes in
// the CPU's order, and it steps its lane through elements j, j + 8, ... writing each symbol
// into the block's bit stream in shared memory, which the block then copies out. A block's
// buckets are a multiple of eight, so its stream starts on a byte boundary. Shared memory
// holds per_group * bucket_size * (b + 1) bytes: bucket_size is limited to 4096
// (kQsgdMaxEncodeBucket); a larger one is refused at construction. Decode takes any size.
#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/device_stream.h"
#include "compressors/cuda/quantizer_kernels.cuh"
#include "compressors/cuda/quantizer_stochastic_logic.h"
#include "compressors/cuda/rng_logic.h"
#include "compressors/qsgd.h"
#include "compressors/rng.h"

namespace gradpress::compressors::cuda {
namespace {

constexpr uint8_t kMaxNorm = QsgdHeader::kMaxNorm;
constexpr int64_t kMaxBucket = QsgdHeader::kMaxBucket;  // the format's limit
constexpr int kGroups = kQsgdGroups;
constexpr int kThreads = 8 * kGroups;
constexpr size_t kDefaultSharedBytes = 48 * 1024;

struct Lanes {
  uint32_t x[8];
};

// Shared bytes of a block's bit stream (whole 32-bit words).
size_t SharedBytes(uint32_t bucket, int width) {
  const uint64_t bits = uint64_t{kGroups} * QsgdPerGroup(bucket) * bucket * width;
  return static_cast<size_t>((bits + 31) / 32 * 4);
}

template <bool kMax>
__global__ void __launch_bounds__(kThreads)
    QsgdEncodeKernel(const float* in, int64_t n, uint32_t bucket, int per_group, uint32_t s, int b,
                     Lanes lanes, const uint32_t* jump, uint8_t* out, int* err) {
  extern __shared__ uint32_t packed[];
  const int width = b + 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  const int j = threadIdx.x % 8, group = threadIdx.x / 8;
  const int lane_base = (threadIdx.x % 32) & ~7;  // the group's first lane in its warp
  const int64_t block_bucket = static_cast<int64_t>(blockIdx.x) * kGroups * per_group;
  const int64_t block_first = block_bucket * bucket;
  const int64_t block_elems =
      block_first < n ? min(static_cast<int64_t>(kGroups) * per_group * bucket, n - block_first)
                      : 0;
  const int64_t block_bytes = (block_elems * width + 7) / 8;
  for (int64_t w = threadIdx.x; w < (block_bytes + 3) / 4; w += blockDim.x) packed[w] = 0;
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    out[0] = kMax ? kMaxNorm : 0;  // fixed width
    out[1] = static_cast<uint8_t>(s);
    out[2] = static_cast<uint8_t>(s >> 8);
    StoreU32(out + 3, bucket);
  }
  __syncthreads();
  uint8_t* norms = out + 7;
  uint8_t* stream = norms + 4 * nb;
  const int64_t first_bucket = block_bucket + static_cast<int64_t>(group) * per_group;
  uint32_t x = lanes.x[j];
  // Every bucket before this one is full: lane j made QsgdLaneDraws(bucket, j) draws in each.
  if (first_bucket < nb) x = Advance32(jump, x, first_bucket * QsgdLaneDraws(bucket, j));
  for (int r = 0; r < per_group; ++r) {  // uniform across the block: shuffles below are safe
    const int64_t kb = first_bucket + r;
    const int64_t first = kb * bucket;
    const int64_t len = kb < nb ? min(static_cast<int64_t>(bucket), n - first) : 0;
    double norm;
    if (kMax) {
      float m = 0.f;
      int bad = 0;
      for (int64_t i = j; i < len; i += 8) {
        const float v = in[first + i];
        m = MaxAbs(m, v);
        bad |= !FiniteF(v);
      }
      for (int off = 4; off > 0; off >>= 1) {  // within the group of eight lanes
        const float o = __shfl_xor_sync(0xFFFFFFFFu, m, off);
        m = m < o ? o : m;
        bad |= __shfl_xor_sync(0xFFFFFFFFu, bad, off);
      }
      norm = bad ? static_cast<double>(BitsFloat(0x7FC00000u)) : m;  // qsgd.cc's NaN probe
    } else {
      float acc = 0.f;
      const int64_t full = len - len % 8;
      for (int64_t i = j; i < full; i += 8) acc = QsgdSquareAdd(acc, in[first + i]);
      if (j == 0)
        for (int64_t i = full; i < len; ++i) acc = QsgdSquareAdd(acc, in[first + i]);
      float accs[8];
      for (int q = 0; q < 8; ++q) accs[q] = __shfl_sync(0xFFFFFFFFu, acc, lane_base + q);
      norm = QsgdL2Norm(accs);
    }
    if (len == 0) continue;  // after the shuffles: every lane of the warp took part
    const bool finite = FiniteD(norm);
    if (!finite && j == 0) RecordError(err, kNonFiniteInput);
    const float norm_f = finite ? static_cast<float>(norm) : 0.f;
    if (j == 0) StoreF32(norms + 4 * kb, norm_f);
    const float scale = QsgdScale(norm_f, s);
    const int64_t local = first - block_first;
    for (int64_t i = j; i < len; i += 8) {
      x = Xorshift32Step(x);
      const uint32_t sym = QsgdSymbol(in[first + i], scale, s, b, x);
      const WordShares sh = ShareField(sym, static_cast<uint64_t>(local + i) * width, width);
      if (sh.lo) atomicOr(&packed[sh.word], sh.lo);
      if (sh.hi) atomicOr(&packed[sh.word + 1], sh.hi);
    }
  }
  __syncthreads();
  uint8_t* dst = stream + block_first * width / 8;  // a whole byte: 8 | kGroups * per_group
  for (int64_t k = threadIdx.x; k < block_bytes; k += blockDim.x) dst[k] = WordByte(packed, k);
}

template <bool kSubtract>
__global__ void QsgdDecodeKernel(const uint8_t* payload, int64_t n, uint32_t bucket, uint32_t s,
                                 int b, float* out, int* err) {
  const int width = b + 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  const uint8_t* norms = payload + 7;
  const uint8_t* stream = norms + 4 * nb;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (tid == 0 && n > 0) {
    const uint64_t bits = static_cast<uint64_t>(n) * width;
    if (!PaddingClear(stream[(bits + 7) / 8 - 1], bits)) RecordError(err, kPaddingBits);
  }
  for (int64_t i = tid; i < n; i += stride) {
    const uint32_t k = static_cast<uint32_t>(i) / bucket;  // n < 2^31
    const float norm = LoadF32(norms + 4 * static_cast<uint64_t>(k));
    if (!(FiniteF(norm) && norm >= 0.f)) RecordError(err, kBadScale);
    const float unit = norm / static_cast<float>(s);
    const uint32_t sym = LoadBits(stream, static_cast<uint64_t>(i) * width, width);
    if ((sym & ((1u << b) - 1)) > s) RecordError(err, kLevelAboveS);
    Emit<kSubtract>(out, i, QsgdValue(sym, b, unit));
  }
}

class QsgdQuantizer : public DeviceQuantizer {
 public:
  explicit QsgdQuantizer(ParamReader& r)
      : levels_(static_cast<uint32_t>(r.Int("levels", 16, 1, 65535))),
        bucket_(static_cast<uint32_t>(r.Int("bucket_size", 512, 1, kMaxBucket))),
        max_norm_(r.Choice("norm", "l2", {"l2", "max"}) == "max"),
        rng_(static_cast<uint64_t>(r.Int("seed", 1, 0, INT64_MAX))) {
    // Read so that the CPU's YAML works (and a malformed value is refused); the GPU writes
    // fixed width whatever it says (see above).
    static_cast<void>(r.Bool("elias", true));
    GP_ENFORCE(bucket_ <= kQsgdMaxEncodeBucket, "qsgd on the GPU: bucket_size ", bucket_,
               " exceeds ", kQsgdMaxEncodeBucket, " (the device encoder's shared-memory limit)");
  }
  std::string Name() const override { return "qsgd"; }
  size_t EncodedBytes(int64_t n) const override { return FixedBytes(n, levels_, bucket_); }

  void EncodeAsync(const float* in, int64_t n, const StepContext&, uint8_t* out, int* err,
                   Stream stream) override {
    GP_ENFORCE(n <= INT32_MAX, "qsgd: ", n, " elements exceed the device codec's 2^31 - 1");
    Lanes lanes;  // qsgd.cc's eight draws per encode, even for n = 0
    for (auto& x : lanes.x) x = static_cast<uint32_t>(rng_.Next() >> 32) | 1u;
    const int b = QsgdLevelBits(levels_);
    const int per_group = QsgdPerGroup(bucket_);
    const size_t shared = SharedBytes(bucket_, b + 1);
    const int64_t nb = (n + bucket_ - 1) / bucket_;
    const unsigned grid = BlocksFor(nb, int64_t{kGroups} * per_group, INT32_MAX);
    if (max_norm_) {
      Launch(QsgdEncodeKernel<true>, grid, shared, in, n, per_group, b, lanes, out, err, stream);
    } else {
      Launch(QsgdEncodeKernel<false>, grid, shared, in, n, per_group, b, lanes, out, err, stream);
    }
  }

  void DecodeAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n, float* out,
                   int* err, Stream stream) override {
    GP_ENFORCE(n <= INT32_MAX, "qsgd: ", n, " elements exceed the device codec's 2^31 - 1");
    ByteReader r(host_bytes, "qsgd");
    const QsgdHeader h = ReadQsgdHeader(r);
    const uint32_t s = h.levels, bucket = h.bucket;
    if (h.elias()) return DecodeEliasOnHost(host_bytes, n, out, stream);
    const size_t expect = FixedBytes(n, s, bucket);
    GP_ENFORCE(host_bytes.size() == expect, "qsgd: payload has ", host_bytes.size(),
               " bytes, expected ", expect, " for ", n, " elements (fixed width)");
    if (n == 0) return;
    QsgdDecodeKernel<false>
        <<<BlocksFor(n, kBlockThreads, GridStrideCap()), kBlockThreads, 0, AsCuda(stream)>>>(
            dev_bytes, n, bucket, s, QsgdLevelBits(s), out, err);
    CheckCuda(cudaGetLastError(), "qsgd: decode kernel");
  }

  void SubtractDecodedAsync(const uint8_t* dev_bytes, int64_t n, float* e, Stream stream) override {
    if (n == 0) return;
    QsgdDecodeKernel<true>
        <<<BlocksFor(n, kBlockThreads, GridStrideCap()), kBlockThreads, 0, AsCuda(stream)>>>(
            dev_bytes, n, bucket_, levels_, QsgdLevelBits(levels_), e, nullptr);
    CheckCuda(cudaGetLastError(), "qsgd: subtract kernel");
  }

  void SaveState(std::string* out) const override { SaveRngState(rng_, out); }
  void LoadState(std::string_view in) override { LoadRngState(in, "qsgd", &rng_); }

 private:
  static size_t FixedBytes(int64_t n, uint32_t s, uint32_t bucket) {
    const auto un = static_cast<uint64_t>(n);
    const uint64_t nb = (un + bucket - 1) / bucket;
    return static_cast<size_t>(7 + 4 * nb + (un * (QsgdLevelBits(s) + 1) + 7) / 8);
  }

  template <typename Kernel>
  void Launch(Kernel kernel, unsigned grid, size_t shared, const float* in, int64_t n,
              int per_group, int b, const Lanes& lanes, uint8_t* out, int* err, Stream stream) {
    if (shared > kDefaultSharedBytes) {  // opt in past the default 48 KiB (sm_90: 227 KiB)
      CheckCuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(shared)),
                "qsgd: cudaFuncSetAttribute(MaxDynamicSharedMemorySize)");
    }
    kernel<<<grid, kThreads, shared, AsCuda(stream)>>>(in, n, bucket_, per_group, levels_, b, lanes,
                                                       DeviceJumpTable32(), out, err);
    CheckCuda(cudaGetLastError(), "qsgd: encode kernel");
  }

  // The CPU codec decodes Elias-gamma levels (sequential by nature) into pinned memory; the
  // floats go up on the stream without a wait: the next call waits for that upload before it
  // writes the staging buffer again (by then usually long done).
  void DecodeEliasOnHost(std::string_view host_bytes, int64_t n, float* out, Stream stream) {
    if (cpu_ == nullptr) {
      CodecSpec spec;
      spec.codec = "qsgd";
      ParamReader defaults(spec);
      cpu_ = std::make_unique<QsgdCompressor>(defaults);  // DecodeTo reads the header only
    }
    if (!staged_) staged_ = std::make_unique<StreamMark>();
    staged_->Wait();
    staging_.Resize(static_cast<size_t>(n) * sizeof(float));
    cpu_->DecodeTo(host_bytes, n, reinterpret_cast<float*>(staging_.data()));
    if (n == 0) return;
    CheckCuda(cudaMemcpyAsync(out, staging_.data(), staging_.size(), cudaMemcpyHostToDevice,
                              AsCuda(stream)),
              "qsgd: cudaMemcpyAsync (Elias decode)");
    staged_->Record(stream);
  }

  uint32_t levels_;
  uint32_t bucket_;
  bool max_norm_;
  Rng rng_;
  std::unique_ptr<QsgdCompressor> cpu_;  // Elias decode on the host
  PinnedBytes staging_;
  std::unique_ptr<StreamMark> staged_;  // the staging buffer's last upload
};

}  // namespace

std::unique_ptr<DeviceQuantizer> MakeDeviceQsgd(ParamReader& r) {
  return std::make_unique<QsgdQuantizer>(r);
}

}  // namespace gradpress::compressors::cuda
