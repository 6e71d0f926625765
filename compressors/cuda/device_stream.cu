// StreamMark, SideStream (device_stream.h): CUDA events and non-blocking streams.
#include <cuda_runtime.h>

#include <cstdint>

#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/device_parts.h"
#include "compressors/cuda/device_stream.h"
#include "compressors/cuda/sparse_parts.h"

namespace gradpress::compressors::cuda {

namespace {
cudaEvent_t AsEvent(void* e) { return static_cast<cudaEvent_t>(e); }
cudaStream_t AsStream(Stream s) { return s ? reinterpret_cast<cudaStream_t>(s) : cudaStreamLegacy; }
}  // namespace

StreamMark::StreamMark() {
  cudaEvent_t e = nullptr;
  CheckCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate (mark)");
  event_ = e;
}

StreamMark::~StreamMark() {
  if (event_) cudaEventDestroy(AsEvent(event_));
}

void StreamMark::Record(Stream stream) {
  CheckCuda(cudaEventRecord(AsEvent(event_), AsStream(stream)), "cudaEventRecord (mark)");
  recorded_ = true;
}

void StreamMark::Wait() const {
  if (recorded_) CheckCuda(cudaEventSynchronize(AsEvent(event_)), "cudaEventSynchronize (mark)");
}

SideStream::SideStream() {
  // The greatest priority (the numerically least): the codec's short kernels are scheduled
  // ahead of the blocks that training's kernels still have pending.
  int least = 0, greatest = 0;
  CheckCuda(cudaDeviceGetStreamPriorityRange(&least, &greatest), "stream priority range");
  cudaStream_t s = nullptr;
  CheckCuda(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest),
            "cudaStreamCreate (side)");
  stream_ = reinterpret_cast<Stream>(s);
}

SideStream::~SideStream() {
  if (stream_) cudaStreamDestroy(reinterpret_cast<cudaStream_t>(stream_));
}

bool StreamMark::Passed() const {
  if (!recorded_) return true;
  const cudaError_t e = cudaEventQuery(AsEvent(event_));
  if (e == cudaErrorNotReady) return false;
  CheckCuda(e, "cudaEventQuery (mark)");
  return true;
}

void StreamMark::Before(Stream stream) const {
  if (!recorded_) return;
  CheckCuda(cudaStreamWaitEvent(AsStream(stream), AsEvent(event_), 0), "cudaStreamWaitEvent");
}

void SideStream::After(const StreamMark& m) { m.Before(stream_); }

void SideStream::AfterDefault() {
  now_.Record(nullptr);
  After(now_);
}

void SideStream::Synchronize() {
  CheckCuda(cudaStreamSynchronize(AsStream(stream_)), "cudaStreamSynchronize (side stream)");
}

void CopyAsync(void* dst, const void* src, size_t bytes, Stream stream) {
  if (bytes == 0) return;
  CheckCuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, AsStream(stream)),
            "cudaMemcpyAsync");
}

namespace {
__global__ void CopyIfClearKernel(float* dst, const float* src, int64_t n, const int* word) {
  if (*word != kDecodeOk) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = src[i];
}
}  // namespace

void CopyFloatsIfClear(float* dst, const float* src, int64_t n, const int* word, Stream stream) {
  if (n <= 0) return;
  constexpr int kThreads = 256;
  CopyIfClearKernel<<<GridFor(n, kThreads), kThreads, 0, AsStream(stream)>>>(dst, src, n, word);
  CheckCuda(cudaGetLastError(), "copy decoded floats");
}

}  // namespace gradpress::compressors::cuda
