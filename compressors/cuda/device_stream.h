#pragma once
// Ordering the codecs' work against LibTorch's, which queues on CUDA's legacy default stream.
// A StreamMark is a point in a stream's queued work (a CUDA event). A SideStream is a
// non-blocking stream for codec work: it waits on the GPU for a mark -- the point where a
// call's gradients are complete -- instead of for everything queued on the default stream
// since (the rest of backward), and a synchronisation on it waits for the codec's work only.
// It has the device's greatest priority, so the codec's short kernels do not queue behind the
// pending blocks of training's long ones.
//
//   StreamMark ready;  ready.Record();            // after backward queued the gradients
//   SideStream s;      s.After(ready);            // codec work on s.get() starts after them
//   codec->Encode(d_grad, n, ctx, &payload, s.get());
//
// No LibTorch here. Thread-safety: one thread at a time per object; a mark recorded on one
// thread may be waited for on another once the recording happened-before.
#include <cstddef>
#include <cstdint>

#include "compressors/cuda/device_codec.h"

namespace gradpress::compressors::cuda {

class StreamMark {
 public:
  StreamMark();
  ~StreamMark();
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;
  // Marks the work queued so far on `stream` (nullptr: the legacy default stream).
  void Record(Stream stream = nullptr);
  // Blocks the calling thread until the GPU has passed the mark; at once if never recorded.
  void Wait() const;
  // Whether the GPU has passed the mark (true if never recorded), without waiting.
  bool Passed() const;
  // Work queued on `stream` (nullptr: the legacy default stream) from now on starts after the
  // GPU has passed the mark; no wait if never recorded.
  void Before(Stream stream) const;
  bool recorded() const { return recorded_; }
  // Forgets the recording (the next Wait returns at once until Record).
  void Reset() { recorded_ = false; }

 private:
  void* event_ = nullptr;  // cudaEvent_t
  bool recorded_ = false;
};

class SideStream {
 public:
  SideStream();  // a stream that does not synchronise with the legacy default stream
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;
  Stream get() const { return stream_; }
  // Work queued here from now on starts after the GPU has passed m (unrecorded: no wait).
  void After(const StreamMark& m);
  // ... after everything queued on the legacy default stream so far.
  void AfterDefault();
  void Synchronize();

 private:
  Stream stream_ = nullptr;
  StreamMark now_;  // AfterDefault's mark
};

// Queues dst[0..n) = src[0..n) on `stream` (device memory), done only if the device word
// `word` is 0 when the copy runs (a decode that found its payload malformed writes nothing).
void CopyFloatsIfClear(float* dst, const float* src, int64_t n, const int* word, Stream stream);

// Queues a copy of `bytes` bytes between host and device memory (either way, or device to
// device) on `stream`; pinned host memory keeps it asynchronous.
void CopyAsync(void* dst, const void* src, size_t bytes, Stream stream);

}  // namespace gradpress::compressors::cuda
