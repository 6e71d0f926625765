// RadixSelect and DeviceSelector::KeepLargest (sparse_parts.h): the exact order statistic of
// 31-bit keys without sorting or a host sync (three histogram passes; the last block of each
// pass scans the bins from the top and fixes the next digit), and the cut of the survivors to
// the k largest magnitudes with one scan whose output writes each kept element to its slot
// (ties at the k-th magnitude go to lower indices, as the CPU's KeepLargest does).
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <algorithm>
#include <cub/cub.cuh>

#include "common/error.h"
#include "compressors/cuda/sparse_parts.h"
#include "compressors/cuda/sparsifier_logic.h"

namespace gradpress::compressors::cuda {
namespace {

constexpr int kRadixThreads = 1024;  // the last block scans up to 2048 bins, two per thread
constexpr int64_t kKeysPerBlock = 4 * kRadixThreads;
constexpr int kMaxRadixBlocks = 1024;
constexpr int kHistWords = 2048 + 1024 + 1024;  // the passes' bins, one after the other

static_assert(kRadixThreads * 2 >= kRadixMaxBins, "two bins per thread in the bin scan");

__host__ __device__ int HistOffset(int pass) { return pass == 0 ? 0 : (pass == 1 ? 2048 : 3072); }

// One pass: a shared histogram of the digits of the keys that match the prefix so far, added
// to the pass's global bins; the last block to finish picks the bin holding the rank.
__global__ void __launch_bounds__(kRadixThreads)
    RadixPassKernel(const uint32_t* keys, const float* vals, int64_t bound, const long long* live,
                    int pass, int64_t rank, RadixState* st, unsigned int* hist_all,
                    Bounds* bounds) {
  using Scan = cub::BlockScan<long long, kRadixThreads>;
  __shared__ unsigned int local[kRadixMaxBins];
  __shared__ typename Scan::TempStorage scan_temp;
  __shared__ bool last;
  const int bins = RadixBins(pass);
  unsigned int* hist = hist_all + HistOffset(pass);
  for (int b = threadIdx.x; b < bins; b += blockDim.x) local[b] = 0;
  __syncthreads();
  const uint32_t prefix = st->prefix;  // set by the previous pass's kernel
  const int64_t count = live != nullptr && *live < bound ? static_cast<int64_t>(*live) : bound;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += stride) {
    const uint32_t key = keys != nullptr ? keys[i] : MagnitudeBits(vals[i]);
    const int d = RadixDigit(key, pass, prefix);
    if (d >= 0) atomicAdd(&local[d], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < bins; b += blockDim.x)
    if (local[b] != 0) atomicAdd(&hist[b], local[b]);
  __threadfence();  // our bins are visible before the count of finished blocks says so
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&st->done[pass], 1u) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Thread t holds the bins 2t and 2t + 1 places from the top; the exclusive scan gives the
  // matching keys in higher bins.
  const long long remaining = rank - st->greater;
  const int top0 = 2 * static_cast<int>(threadIdx.x), top1 = top0 + 1;
  const long long c0 = top0 < bins ? __ldcg(&hist[bins - 1 - top0]) : 0u;
  const long long c1 = top1 < bins ? __ldcg(&hist[bins - 1 - top1]) : 0u;
  long long above = 0;
  Scan(scan_temp).ExclusiveSum(c0 + c1, above);
  int bin = -1;
  if (RadixBinHolds(above, c0, remaining)) {
    bin = bins - 1 - top0;
  } else if (RadixBinHolds(above + c0, c1, remaining)) {
    bin = bins - 1 - top1;
    above += c0;
  }
  if (bin < 0) return;  // exactly one thread holds the rank
  const uint32_t key = prefix | (static_cast<uint32_t>(bin) << RadixShift(pass));
  st->prefix = key;
  st->greater += above;
  if (bounds != nullptr) {
    const float t = NextTowardZero(key);
    bounds->lo = -t;
    bounds->hi = t;
    bounds->t = t;
  }
}

// KeepLargest's scan: the flags of survivor i, and the write of a kept one to its slot. With
// `live`, the survivors at i >= *live are not there (a count left on the device).
struct KeepFlagOp {
  const float* val;
  const RadixState* st;
  const long long* live;
  __host__ __device__ uint64_t operator()(int32_t i) const {
    if (live != nullptr && i >= *live) return 0;
    return KeepFlags(MagnitudeBits(val[i]), st->prefix);
  }
};
struct PutKept {
  const int32_t* idx;
  const float* val;
  const RadixState* st;
  const long long* live;
  int64_t k;
  int32_t* out_idx;
  float* out_val;
  __host__ __device__ void operator()(ptrdiff_t i, uint64_t before) const {
    if (live != nullptr && i >= *live) return;
    const int64_t slot = KeepSlot(MagnitudeBits(val[i]), st->prefix, before, k - st->greater);
    if (slot >= 0 && slot < k) {
      out_idx[slot] = idx[i];
      out_val[slot] = val[i];
    }
  }
};

}  // namespace

void RadixSelect::Run(const uint32_t* keys, const float* vals, int64_t count, int64_t rank,
                      Bounds* bounds, Stream stream, const long long* live) {
  GP_ENFORCE_AS(Internal, count > 0 && rank >= 0 && rank < count, "sparsifier: rank ", rank, " of ",
                count, " keys");
  const size_t bytes = sizeof(RadixState) + kHistWords * sizeof(unsigned int);
  scratch_.Reserve(bytes);
  auto* st = reinterpret_cast<RadixState*>(scratch_.data());
  auto* hist = reinterpret_cast<unsigned int*>(scratch_.data() + sizeof(RadixState));
  CheckCuda(cudaMemsetAsync(st, 0, bytes, stream), "sparsifier: clear radix select");
  const auto blocks = static_cast<int>(
      std::clamp<int64_t>((count + kKeysPerBlock - 1) / kKeysPerBlock, 1, kMaxRadixBlocks));
  for (int pass = 0; pass < kRadixPasses; ++pass) {
    RadixPassKernel<<<blocks, kRadixThreads, 0, stream>>>(
        keys, vals, count, live, pass, rank, st, hist, pass == kRadixPasses - 1 ? bounds : nullptr);
    CheckCuda(cudaGetLastError(), "sparsifier: radix select pass");
  }
}

Kept DeviceSelector::KeepLargest(int64_t k, Stream stream) {
  if (survivors_ <= k) return Survivors();
  if (k <= 0) return Kept{};
  return CutToK(survivors_, k, nullptr, stream);
}

Kept DeviceSelector::CutToK(int64_t c, int64_t k, const long long* live, Stream stream) {
  const auto* idx = reinterpret_cast<const int32_t*>(surv_idx_.data());
  const auto* val = reinterpret_cast<const float*>(surv_val_.data());
  radix_.Run(nullptr, val, c, k - 1, nullptr, stream, live);
  int32_t* out_idx = kept_idx_.as<int32_t>(k);
  float* out_val = kept_val_.as<float>(k);
  const RadixState* st = radix_.state();
  thrust::transform_iterator<KeepFlagOp, thrust::counting_iterator<int32_t>, uint64_t> flags(
      thrust::counting_iterator<int32_t>(0), KeepFlagOp{val, st, live});
  auto out =
      thrust::make_tabulate_output_iterator(PutKept{idx, val, st, live, k, out_idx, out_val});
  const int items = static_cast<int>(c);
  size_t bytes = 0;
  CheckCuda(cub::DeviceScan::ExclusiveSum(nullptr, bytes, flags, out, items, stream),
            "sparsifier: keep largest size");
  temp_.Reserve(std::max<size_t>(bytes, 16));  // cub runs nothing when given a null pointer
  CheckCuda(cub::DeviceScan::ExclusiveSum(temp_.data(), bytes, flags, out, items, stream),
            "sparsifier: keep largest");
  return Kept{out_idx, out_val, k, 0};
}

}  // namespace gradpress::compressors::cuda
