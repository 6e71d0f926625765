#pragma once
// The worker's codecs for gradients that live on the GPU: a CUDA tensor is encoded on the
// device (compressors/cuda) straight into pinned host memory, and a pulled payload is decoded
// into the CUDA tensor, instead of copying each tensor to pageable host memory and back. The
// payloads are the CPU codecs' (a CPU worker, the server and this path read each other's).
//
//   DeviceCodecs dev;
//   if (dev.EncodeAsync(i, spec, 0, cpu_codec, grad, {key, step}, ready))  // else: CPU
//     ...; ready->Wait(); dev.EncodeFinish(i, &payload);
//   if (dev.Decode(i, payload, &out_tensor)) ...;                           // else: CPU
//
// Key i's device codec is made on its first CUDA gradient, from the CPU codec's checkpoint
// state (the formats are the same), so a resumed job continues its residuals and RNG streams
// on the GPU. A codec without a device kernel (powersgd, signum) and builds without nvcc keep
// the CPU path: EncodeAsync / Decode return false. So do tensors under
// kDeviceMinNumel elements: each device call launches several kernels and synchronises a few
// times, which costs more than the host path's copy and encode for small tensors; the host path
// copies a call's CUDA tensors to pinned memory in one batch (CopyToHost) and decoded tensors
// up without a wait (CopyFromHost).
// Streams: LibTorch queues on CUDA's legacy default stream. Key i's codec work runs on its own
// non-blocking side stream, which starts after the call's CudaMark (where backward completed
// the call's gradients; without one, after everything queued so far), so its synchronisations
// wait for the codec and not for the rest of backward or the next forward. A device decode
// writes a scratch tensor on the side stream and queues its copy into the destination on the
// default stream, so work queued there before it (reading the destination) comes first; that
// copy happens only if the decode's kernels found the payload well formed, so a caller may
// check later (DecodeChecks) instead of waiting for the GPU in the call.
// Thread-safety: Encode, Decode and CopyToHost of different keys (calls) may run concurrently.
#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/codec_spec.h"
#include "compressors/compressor.h"

namespace gradpress::worker {

// The smallest tensor the device codecs take: 2^18 floats (1 MiB), where the host path's
// pageable copy and encode cost about what a device call's launches and synchronisations do.
constexpr int64_t kDeviceMinNumel = int64_t{1} << 18;

// A point in the work LibTorch queued on CUDA (the legacy default stream), recorded where a
// call's gradients are complete (the bucket scheduler, after the bucket's last gradient).
// Unrecorded, or in a build without nvcc, Wait returns at once.
class CudaMark {
 public:
  CudaMark();
  ~CudaMark();
  CudaMark(const CudaMark&) = delete;
  CudaMark& operator=(const CudaMark&) = delete;
  void Record();        // marks the work queued so far on the legacy default stream
  void Reset();         // unrecorded again (a new step)
  void Wait() const;    // blocks until the GPU has passed the mark
  bool Passed() const;  // whether it has, without waiting (true when unrecorded)
  bool recorded() const;

 private:
  friend class DeviceCodecs;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The checks of a call's device decodes that did not wait (StepCall::decoded). Check, before
// the decoded tensors are used, waits for those decodes (by then usually done) and throws the
// InvalidArgument of the first malformed payload; a malformed payload wrote nothing.
// Thread-safety: Add from any thread; Check and Clear on one thread at a time.
class DecodeChecks {
 public:
  void Add(std::function<void()> check);
  void Check();  // runs the checks added since the last Check or Clear
  void Clear();  // forgets them (a step whose results are dropped)

 private:
  std::mutex mu_;
  std::vector<std::function<void()>> checks_;
};

class DeviceCodecs {
 public:
  DeviceCodecs();
  ~DeviceCodecs();
  DeviceCodecs(const DeviceCodecs&) = delete;
  DeviceCodecs& operator=(const DeviceCodecs&) = delete;

  // Sizes the per-key table (Register); drops every device codec.
  void Reset(size_t keys);
  // Queues the encode of key i's gradient g on the device with `spec` (the key's codec, inside
  // DGC's momentum correction when momentum > 0; `state_from` is its CPU codec, whose state a
  // new device codec starts from), after `ready` (null: after all work queued so far). A codec
  // that must read a size from the GPU to queue its work (a survivor count) calls wait_ready
  // first (which waits for `ready`). False: take the CPU path. True: call EncodeFinish(i) next
  // (g and ctx.key stay valid until then).
  bool EncodeAsync(size_t i, const CodecSpec& spec, double momentum,
                   const compressors::Compressor& state_from, const torch::Tensor& g,
                   const compressors::StepContext& ctx, const CudaMark* ready,
                   const std::function<void()>& wait_ready);
  // Waits for key i's queued encode and writes its payload into *out.
  void EncodeFinish(size_t i, compressors::Payload* out);
  // Decodes p into key i's tensor out when out is a large contiguous float32 CUDA tensor and
  // p's codec has a device decoder. False: take the CPU path. With `later`, returns without
  // waiting for the GPU: the check of what its kernels found is added there, and out is
  // written (on LibTorch's stream) only if they found the payload well formed.
  bool Decode(size_t i, const compressors::Payload& p, torch::Tensor* out,
              DecodeChecks* later = nullptr);
  // Replaces each defined CUDA tensor of *ts (a call's keys, the first of them key `first`)
  // by a pinned float32 host copy, complete on return: the copies queue on key first's side
  // stream after `ready` (null: after all work queued so far) with one wait for the lot. CPU
  // tensors are left as they are.
  void CopyToHost(size_t first, std::vector<torch::Tensor>* ts, const CudaMark* ready);
  // Key i's device codec state (the CPU codec's format); false when it has none.
  bool SaveState(size_t i, std::string* out) const;
  // Sets every device codec's density (DGC's warm-up).
  void SetDensity(double ratio);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// A pinned host float32 tensor of `sizes` from LibTorch's caching host allocator (CUDA builds
// only: call it for data bound for a CUDA tensor).
torch::Tensor PinnedFloats(at::IntArrayRef sizes);
// Queues the copy of pinned host `from` into CUDA tensor *to on the current stream and returns
// without waiting: the caching host allocator keeps `from`'s memory until the copy is done,
// and later work on the stream sees *to written.
void CopyFromHost(const torch::Tensor& from, torch::Tensor* to);

}  // namespace gradpress::worker
