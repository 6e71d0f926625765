// The index codings of the device sparsifiers (sparse_parts.h): delta varints written in
// parallel (one exclusive scan of their lengths whose output writes each one), their decoding (each
// varint's start is the byte after a terminator; a scan of terminators numbers them; a scan of
// the gaps gives the indices), int32 lists, randomk's stratified indices (one jump-ahead per
// thread, then steps), and the scatters that write decoded values.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <cstring>
#include <cub/cub.cuh>

#include "common/error.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/rng_logic.h"
#include "compressors/cuda/sparse_parts.h"
#include "compressors/cuda/sparsifier_index_logic.h"
#include "compressors/cuda/sparsifier_logic.h"

namespace gradpress::compressors::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kStratumChunk = 32;  // randomk indices per thread: one jump-ahead, then steps
constexpr int kStratumBatch = 8;   // value loads a thread keeps in flight
constexpr int kMaxBlocks = 16384;  // grid-stride kernels cover the rest

void* Temp(DeviceBytes* b, size_t bytes) {
  b->Reserve(std::max<size_t>(bytes, 16));  // cub runs nothing when given a null pointer
  return b->data();
}

__device__ void RecordError(int* err, int code) { atomicCAS(err, 0, code); }

#define GP_GRID_STRIDE(i, count)                                                             \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (count); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The delta scan's input: bytes of varint j, and 0 at j = k so that the exclusive scan's
// entry k is the total.
struct VarintLengthOp {
  const int32_t* idx;
  int64_t k;
  __host__ __device__ int64_t operator()(int64_t j) const {
    return j < k ? VarintLength(DeltaGap(idx[j], j > 0 ? idx[j - 1] : -1)) : 0;
  }
};
// Its output: varint j written at its offset (each thread its own), and the total.
struct PutVarintAt {
  const int32_t* idx;
  int64_t k;
  uint8_t* out;
  long long* total;
  __host__ __device__ void operator()(ptrdiff_t j, int64_t offset) const {
    if (j < k)
      WriteVarint(DeltaGap(idx[j], j > 0 ? idx[j - 1] : -1), out + offset);
    else
      *total = offset;
  }
};

__global__ void Int32PositionsKernel(const uint8_t* p, int64_t k, int64_t n, int64_t* pos,
                                     int* err) {
  GP_GRID_STRIDE(j, k) {
    int32_t idx = 0;
    const int code = CheckInt32Index(p, j, n, &idx);
    if (code != kDecodeOk) RecordError(err, code);
    pos[j] = code == kDecodeOk ? idx : -1;
  }
}

// Indices j of StratifiedIndices for the Rng state state0: with `in`, also the kept values
// (randomk's encode); without, int64 positions (its decode).
__global__ void StratifiedKernel(const float* __restrict__ in, uint64_t state0,
                                 const uint64_t* jump, int64_t k, int64_t n, bool unbiased,
                                 int32_t* idx, float* val, int64_t* pos) {
  const int64_t first =
      (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * kStratumChunk;
  if (first >= k) return;
  const int64_t last = first + kStratumChunk < k ? first + kStratumChunk : k;
  uint64_t state = Advance64(jump, state0, static_cast<uint64_t>(first));
  // A batch's indices first, then its loads together (one at a time, each would wait out the
  // memory latency).
  for (int64_t j0 = first; j0 < last; j0 += kStratumBatch) {
    int32_t at[kStratumBatch];
    int64_t size[kStratumBatch];
#pragma unroll
    for (int b = 0; b < kStratumBatch; ++b) {
      at[b] = -1;
      size[b] = 0;
      if (j0 + b < last) {
        state = Xorshift64Step(state);
        at[b] = StratifiedIndex(state, j0 + b, k, n, &size[b]);
      }
    }
    if (in == nullptr) {
#pragma unroll
      for (int b = 0; b < kStratumBatch; ++b)
        if (at[b] >= 0) pos[j0 + b] = at[b];
      continue;
    }
    float v[kStratumBatch];
#pragma unroll
    for (int b = 0; b < kStratumBatch; ++b) v[b] = at[b] >= 0 ? in[at[b]] : 0.f;
#pragma unroll
    for (int b = 0; b < kStratumBatch; ++b) {
      if (at[b] < 0) continue;
      idx[j0 + b] = at[b];
      val[j0 + b] = unbiased ? v[b] * static_cast<float>(size[b]) : v[b];
    }
  }
}

// 1 for a byte that ends a varint, over [0, len]; the byte at len counts 0 (the exclusive
// scan's last entry is then the number of varint ends).
struct VarintEndFlag {
  const uint8_t* p;
  int64_t len;
  __host__ __device__ int32_t operator()(int64_t b) const {
    return b < len && IsVarintEnd(p[b]) ? 1 : 0;
  }
};

// steps[j] for the varint j < k that starts at byte b (b = 0 or the byte after an end): the
// amount its gap adds to the previous index. The region must end exactly at the k-th end.
__global__ void DeltaStepsKernel(const uint8_t* p, int64_t len, int64_t k, int64_t n,
                                 const int32_t* ends, int64_t* steps, int* err) {
  GP_GRID_STRIDE(b, len) {
    if (b == 0 && (ends[len] != k || !IsVarintEnd(p[len - 1]))) RecordError(err, kIndexCount);
    if (b > 0 && !IsVarintEnd(p[b - 1])) continue;
    const int64_t j = ends[b];
    if (j >= k) continue;
    int code = kDecodeOk;
    const int64_t step = DeltaStep(p + b, len - b, j, n, &code);
    if (step < 0) RecordError(err, code);
    steps[j] = step < 0 ? 0 : step;
  }
}

__global__ void ScatterKernel(const int64_t* pos, const float* values, const uint8_t* value_bytes,
                              int64_t k, int64_t n, float* out, int* err) {
  if (*static_cast<volatile int*>(err) != kDecodeOk) return;  // malformed: write nothing
  GP_GRID_STRIDE(j, k) {
    const int64_t p = pos[j];
    if (p < 0 || p >= n) {
      RecordError(err, kIndexOutOfRange);
      continue;
    }
    out[p] = values != nullptr ? values[j] : LoadF32(value_bytes + 4 * j);
  }
}

__global__ void SubtractAtKernel(const int32_t* idx, const float* values, int64_t k, float* e) {
  GP_GRID_STRIDE(j, k) { e[idx[j]] -= values[j]; }
}

}  // namespace

int GridFor(int64_t items, int threads) {
  const int64_t blocks = (items + threads - 1) / threads;
  return static_cast<int>(std::clamp<int64_t>(blocks, 1, kMaxBlocks));
}

const uint8_t* DeltaEncoder::Encode(const int32_t* idx, int64_t k, Stream stream) {
  k_ = k;
  if (k == 0) return nullptr;
  auto* total = total_.as<long long>(1);
  uint8_t* out = out_.as<uint8_t>(5 * static_cast<size_t>(k));  // a gap < 2^31 takes <= 5
  // One scan: lengths computed as it reads, varints written as it writes (no length or
  // offset arrays, no separate kernels).
  thrust::transform_iterator<VarintLengthOp, thrust::counting_iterator<int64_t>, int64_t> lens(
      thrust::counting_iterator<int64_t>(0), VarintLengthOp{idx, k});
  auto put = thrust::make_tabulate_output_iterator(PutVarintAt{idx, k, out, total});
  size_t temp = 0;
  CheckCuda(cub::DeviceScan::ExclusiveSum(nullptr, temp, lens, put, k + 1, stream),
            "sparsifier: varint offsets size");
  CheckCuda(cub::DeviceScan::ExclusiveSum(Temp(&temp_, temp), temp, lens, put, k + 1, stream),
            "sparsifier: write varints");
  host_total_.Resize(sizeof(long long));
  CheckCuda(
      cudaMemcpyAsync(host_total_.data(), total, sizeof(long long), cudaMemcpyDeviceToHost, stream),
      "sparsifier: copy varint total");
  return out;
}

int64_t DeltaEncoder::Wait(Stream stream) const {
  CheckCuda(cudaStreamSynchronize(stream), "sparsifier: wait for the varint total");
  return Total();
}

int64_t DeltaEncoder::Total() const {
  if (k_ == 0) return 0;
  long long total = 0;
  std::memcpy(&total, host_total_.data(), sizeof(total));
  GP_ENFORCE_AS(Internal, total >= k_ && total <= 5 * k_, "sparsifier: ", total,
                " varint bytes for ", k_, " indices");
  return total;
}

const int64_t* IndexDecoder::Int32(const uint8_t* dev, int64_t k, int64_t n, int* err,
                                   Stream stream) {
  int64_t* pos = pos_.as<int64_t>(std::max<int64_t>(k, 1));
  if (k == 0) return pos;
  Int32PositionsKernel<<<GridFor(k, kThreads), kThreads, 0, stream>>>(dev, k, n, pos, err);
  CheckCuda(cudaGetLastError(), "sparsifier: int32 indices");
  return pos;
}

const int64_t* IndexDecoder::Stratified(uint64_t state0, int64_t k, int64_t n, Stream stream) {
  int64_t* pos = pos_.as<int64_t>(std::max<int64_t>(k, 1));
  if (k == 0) return pos;
  const int64_t threads = (k + kStratumChunk - 1) / kStratumChunk;
  StratifiedKernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0,
                     stream>>>(nullptr, state0, DeviceJumpTable64(), k, n, false, nullptr, nullptr,
                               pos);
  CheckCuda(cudaGetLastError(), "randomk: stratified indices");
  return pos;
}

void IndexDecoder::CountEnds(const uint8_t* dev, int64_t len, Stream stream) {
  int32_t* ends = ends_.as<int32_t>(len + 1);
  thrust::transform_iterator<VarintEndFlag, thrust::counting_iterator<int64_t>> flags(
      thrust::counting_iterator<int64_t>(0), VarintEndFlag{dev, len});
  size_t temp = 0;
  CheckCuda(cub::DeviceScan::ExclusiveSum(nullptr, temp, flags, ends, len + 1, stream),
            "sparsifier: varint ends size");
  CheckCuda(cub::DeviceScan::ExclusiveSum(Temp(&temp_, temp), temp, flags, ends, len + 1, stream),
            "sparsifier: varint ends");
}

const int64_t* IndexDecoder::Delta(const uint8_t* dev, int64_t len, int64_t k, int64_t n, int* err,
                                   Stream stream) {
  int64_t* pos = pos_.as<int64_t>(std::max<int64_t>(k, 1));
  if (k == 0) return pos;
  GP_ENFORCE_AS(Internal, len > 0, "sparsifier: no varint bytes for k=", k);
  CountEnds(dev, len, stream);
  int64_t* steps = steps_.as<int64_t>(k);
  // Unwritten steps (fewer than k varints) are only read after an error is recorded, and
  // ScatterAsync then writes nothing.
  DeltaStepsKernel<<<GridFor(len, kThreads), kThreads, 0, stream>>>(
      dev, len, k, n, reinterpret_cast<const int32_t*>(ends_.data()), steps, err);
  CheckCuda(cudaGetLastError(), "sparsifier: varint gaps");
  size_t temp = 0;
  CheckCuda(cub::DeviceScan::InclusiveSum(nullptr, temp, steps, pos, k, stream),
            "sparsifier: delta indices size");
  CheckCuda(cub::DeviceScan::InclusiveSum(Temp(&temp_, temp), temp, steps, pos, k, stream),
            "sparsifier: delta indices");
  return pos;
}

void ScatterAsync(const int64_t* pos, const float* values, const uint8_t* value_bytes, int64_t k,
                  int64_t n, float* out, int* err, Stream stream) {
  if (k == 0) return;
  ScatterKernel<<<GridFor(k, kThreads), kThreads, 0, stream>>>(pos, values, value_bytes, k, n, out,
                                                               err);
  CheckCuda(cudaGetLastError(), "sparsifier: scatter");
}

void SubtractAtAsync(const int32_t* idx, const float* values, int64_t k, float* e, Stream stream) {
  if (k == 0) return;
  SubtractAtKernel<<<GridFor(k, kThreads), kThreads, 0, stream>>>(idx, values, k, e);
  CheckCuda(cudaGetLastError(), "sparsifier: subtract decoded");
}

void StratifiedSelectAsync(const float* in, uint64_t state0, int64_t k, int64_t n, bool unbiased,
                           int32_t* idx, float* val, Stream stream) {
  if (k == 0) return;
  const int64_t threads = (k + kStratumChunk - 1) / kStratumChunk;
  StratifiedKernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0,
                     stream>>>(in, state0, DeviceJumpTable64(), k, n, unbiased, idx, val, nullptr);
  CheckCuda(cudaGetLastError(), "randomk: select");
}

}  // namespace gradpress::compressors::cuda
