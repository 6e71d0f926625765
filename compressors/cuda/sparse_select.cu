// DeviceSelector (sparse_parts.h): the selection of topk, dgc, threshold and gaussiank on the
// device. Bounds come from the host, from the CPU's own sample (SampledAbsThreshold, drawn
// with jump-ahead so the threshold and the Rng's next state are the CPU's), or from a Gaussian
// fit; one cub::DeviceSelect pass then keeps in[i] outside the bounds in index order, writing
// through a capped output so that the buffers follow the survivors rather than n. The sampled
// threshold is an order statistic found by RadixSelect; the exact cut to k (KeepLargest) is
// in sparse_radix.cu.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cub/cub.cuh>
#include <limits>

#include "common/error.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/rng_logic.h"
#include "compressors/cuda/sparse_parts.h"
#include "compressors/cuda/sparsifier_logic.h"

namespace gradpress::compressors::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kSampleChunk = 64;     // samples per thread: one jump-ahead, then steps
constexpr int kSampleBatch = 16;     // sample loads a thread keeps in flight
constexpr int kMomentBlocks = 1024;  // partial sums of gaussiank's moments, summed in order

// The device words of a selection, read back together after each compaction.
struct SelectControl {
  long long count;  // survivors of the last compaction (cub::DeviceSelect's count)
  Bounds b;
  int unused;
};

void* Temp(DeviceBytes* b, size_t bytes) {
  b->Reserve(std::max<size_t>(bytes, 16));  // cub runs nothing when given a null pointer
  return b->data();
}

__global__ void SetBoundsKernel(SelectControl* c, float lo, float hi, float t) {
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    c->b.lo = lo;
    c->b.hi = hi;
    c->b.t = t;
  }
}

// Every element's magnitude (the CPU samples everything when m >= n).
__global__ void AbsKeysKernel(const float* in, int64_t n, uint32_t* keys) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride)
    keys[i] = MagnitudeBits(in[i]);
}

// Sample s < m reads in[SamplePosition(s)] with draw s of the Rng whose state is state0. The
// positions of a batch are drawn first so that its loads are in flight together (a load per
// step would wait out the memory latency kSampleChunk times in a row).
__global__ void SampleKeysKernel(const float* __restrict__ in, int64_t n, int64_t m, double stride,
                                 uint64_t state0, const uint64_t* jump,
                                 uint32_t* __restrict__ keys) {
  const int64_t first =
      (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * kSampleChunk;
  if (first >= m) return;
  const int64_t last = first + kSampleChunk < m ? first + kSampleChunk : m;
  uint64_t state = Advance64(jump, state0, static_cast<uint64_t>(first));
  for (int64_t s0 = first; s0 < last; s0 += kSampleBatch) {
    int64_t pos[kSampleBatch];
#pragma unroll
    for (int j = 0; j < kSampleBatch; ++j) {
      pos[j] = -1;
      if (s0 + j < last) {
        state = Xorshift64Step(state);
        pos[j] = SamplePosition(s0 + j, n, stride, Xorshift64Out(state));
      }
    }
    float v[kSampleBatch];
#pragma unroll
    for (int j = 0; j < kSampleBatch; ++j) v[j] = pos[j] >= 0 ? in[pos[j]] : 0.f;
#pragma unroll
    for (int j = 0; j < kSampleBatch; ++j)
      if (pos[j] >= 0) keys[s0 + j] = MagnitudeBits(v[j]);
  }
}

// Per-block sums of d = in[i] - in[0] and d^2 in double (MeanStd shifts by the first element).
__global__ void MomentsKernel(const float* in, int64_t n, double* partials) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  const float shift = in[0];
  double s = 0.0, q = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += stride) {
    const float d = in[i] - shift;
    s += static_cast<double>(d);
    q += static_cast<double>(d) * static_cast<double>(d);
  }
  const double bs = Reduce(temp).Sum(s);
  __syncthreads();  // temp is reused
  const double bq = Reduce(temp).Sum(q);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = bs;
    partials[2 * blockIdx.x + 1] = bq;
  }
}

// One block: sums the partials in a fixed order (deterministic) and sets the bounds.
__global__ void GaussianBoundsKernel(const double* partials, int blocks, const float* in, int64_t n,
                                     double z, SelectControl* c, int* err) {
  using Reduce = cub::BlockReduce<double, kThreads>;
  __shared__ typename Reduce::TempStorage temp;
  double s = 0.0, q = 0.0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) {
    s += partials[2 * b];
    q += partials[2 * b + 1];
  }
  const double bs = Reduce(temp).Sum(s);
  __syncthreads();
  const double bq = Reduce(temp).Sum(q);
  if (threadIdx.x == 0) {
    float lo = 0.f, hi = 0.f;
    if (!GaussianBounds(bs, bq, n, in[0], z, &lo, &hi)) {
      lo = hi = __int_as_float(0x7FC00000);  // NaN bounds keep nothing
      atomicCAS(err, 0, static_cast<int>(kNonFiniteInput));
    }
    c->b.lo = lo;
    c->b.hi = hi;
    c->b.t = 0.f;
  }
}

// The compaction's predicate and its capped output (positions >= cap are only counted).
// The predicate sees the value itself (FlaggedIf loads the gradient as the flags, coalesced),
// while the selected items are the indices.
struct OutsideOp {
  const SelectControl* c;
  __host__ __device__ bool operator()(float v) const { return OutsideBounds(v, c->b.lo, c->b.hi); }
};
struct PutSurvivor {
  const float* in;
  int32_t* idx;
  float* val;
  int64_t cap;
  __host__ __device__ void operator()(ptrdiff_t pos, int32_t i) const {
    if (pos < cap) {
      idx[pos] = i;
      val[pos] = in[i];
    }
  }
};

}  // namespace

void DeviceSelector::SetBounds(float lo, float hi, float t, Stream stream) {
  auto* c = control_.as<SelectControl>(1);
  SetBoundsKernel<<<1, 1, 0, stream>>>(c, lo, hi, t);
  CheckCuda(cudaGetLastError(), "sparsifier: set bounds");
}

void DeviceSelector::SampleBounds(const float* in, int64_t n, double ratio, int64_t m, Rng* rng,
                                  Stream stream) {
  GP_ENFORCE_AS(Internal, n > 0, "sparsifier: SampleBounds on an empty tensor");
  const bool all = m >= n;
  const int64_t size = all ? n : std::max<int64_t>(m, 1);
  uint32_t* a = keys_.as<uint32_t>(size);
  if (all) {
    AbsKeysKernel<<<GridFor(n, kThreads), kThreads, 0, stream>>>(in, n, a);
  } else {
    const double stride = static_cast<double>(n) / static_cast<double>(size);
    const int64_t threads = (size + kSampleChunk - 1) / kSampleChunk;
    SampleKeysKernel<<<static_cast<unsigned>((threads + kThreads - 1) / kThreads), kThreads, 0,
                       stream>>>(in, n, size, stride, rng->state(), DeviceJumpTable64(), a);
    // The CPU's Rng made one draw per sample.
    rng->set_state(Advance64(HostJumpTable64(), rng->state(), static_cast<uint64_t>(size)));
  }
  CheckCuda(cudaGetLastError(), "sparsifier: sample magnitudes");
  const int64_t above = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(ratio * static_cast<double>(size))), 1, size);
  // nth_element's key at ascending place size - above is the one at descending rank above - 1;
  // the select sets the bounds to -+nextafter(key, 0) so that it passes a strict '>'.
  radix_.Run(a, nullptr, size, above - 1, &control_.as<SelectControl>(1)->b, stream);
}

void DeviceSelector::GaussianBounds(const float* in, int64_t n, double z, int* err, Stream stream) {
  GP_ENFORCE_AS(Internal, n > 0, "gaussiank: bounds of an empty tensor");
  const int blocks = std::min(GridFor(n, kThreads), kMomentBlocks);
  double* partials = partials_.as<double>(2 * static_cast<size_t>(blocks));
  MomentsKernel<<<blocks, kThreads, 0, stream>>>(in, n, partials);
  CheckCuda(cudaGetLastError(), "gaussiank: moments");
  GaussianBoundsKernel<<<1, kThreads, 0, stream>>>(partials, blocks, in, n, z,
                                                   control_.as<SelectControl>(1), err);
  CheckCuda(cudaGetLastError(), "gaussiank: bounds");
}

void DeviceSelector::QueueCompaction(const float* in, int64_t n, Stream stream) {
  GP_ENFORCE_AS(Internal, n > 0 && n <= std::numeric_limits<int32_t>::max(),
                "sparsifier: compaction of ", n, " elements");
  auto* c = control_.as<SelectControl>(1);
  int32_t* idx = surv_idx_.as<int32_t>(capacity_);
  float* val = surv_val_.as<float>(capacity_);
  auto out = thrust::make_tabulate_output_iterator(PutSurvivor{in, idx, val, capacity_});
  thrust::counting_iterator<int32_t> items(0);
  size_t bytes = 0;
  CheckCuda(cub::DeviceSelect::FlaggedIf(nullptr, bytes, items, in, out, &c->count, n, OutsideOp{c},
                                         stream),
            "sparsifier: compaction size");
  CheckCuda(cub::DeviceSelect::FlaggedIf(Temp(&temp_, bytes), bytes, items, in, out, &c->count, n,
                                         OutsideOp{c}, stream),
            "sparsifier: compaction");
}

void DeviceSelector::QueueControlCopy(Stream stream) {
  control_host_.Resize(sizeof(SelectControl));
  CheckCuda(cudaMemcpyAsync(control_host_.data(), control_.data(), sizeof(SelectControl),
                            cudaMemcpyDeviceToHost, stream),
            "sparsifier: copy the selection's count");
}

int64_t DeviceSelector::Compact(const float* in, int64_t n, int64_t expected, float* t,
                                Stream stream) {
  capacity_ = std::max(capacity_, std::clamp<int64_t>(expected, 1, n));
  for (int pass = 0;; ++pass) {
    QueueCompaction(in, n, stream);
    QueueControlCopy(stream);
    CheckCuda(cudaStreamSynchronize(stream), "sparsifier: read the selection's count");
    SelectControl host;
    std::memcpy(&host, control_host_.data(), sizeof(host));
    survivors_ = host.count;
    *t = host.b.t;
    GP_ENFORCE_AS(Internal, survivors_ >= 0 && survivors_ <= n, "sparsifier: compaction kept ",
                  survivors_, " of ", n);
    if (survivors_ <= capacity_) break;
    GP_ENFORCE_AS(Internal, pass == 0, "sparsifier: compaction overflowed twice");
    capacity_ = survivors_;  // the same bounds select the same elements again
  }
  return survivors_;
}

Kept DeviceSelector::SpeculateLargest(const float* in, int64_t n, int64_t expected, int64_t k,
                                      Stream stream) {
  GP_ENFORCE_AS(Internal, k > 0 && k <= n, "sparsifier: speculating k=", k, " of ", n);
  capacity_ = std::max({capacity_, std::clamp<int64_t>(expected, 1, n), k});
  QueueCompaction(in, n, stream);
  QueueControlCopy(stream);
  const auto* c = control_.as<SelectControl>(1);
  speculated_k_ = k;
  survivors_ = -1;  // known after the stream has run (Missed)
  return CutToK(capacity_, k, &c->count, stream);
}

bool DeviceSelector::Missed() {
  if (speculated_k_ == 0) return false;
  SelectControl host;
  std::memcpy(&host, control_host_.data(), sizeof(host));
  const int64_t k = speculated_k_;
  speculated_k_ = 0;
  if (host.count < k || host.count > capacity_) return true;
  survivors_ = host.count;
  return false;
}

Kept DeviceSelector::Survivors() {
  return Kept{reinterpret_cast<const int32_t*>(surv_idx_.data()),
              reinterpret_cast<const float*>(surv_val_.data()), survivors_, 0};
}

}  // namespace gradpress::compressors::cuda
