#pragma once
// The worker's codecs for gradients that live on the GPU: a CUDA tensor is encoded on the
// device (compressors/cuda) straight into pinned host memory, and a pulled payload is decoded
// into the CUDA tensor, instead of copying each tensor to pageable host memory and back. The
// payloads are the CPU codecs' (a CPU worker, the server and this path read each other's).
//
//   DeviceCodecs dev;
//   if (dev.Encode(i, spec, cpu_codec, grad, {key, step}, &payload)) ...;  // else: CPU path
//   if (dev.Decode(payload, &out_tensor)) ...;                               // else: CPU path
//
// Key i's device codec is made on its first CUDA gradient, from the CPU codec's checkpoint
// state (the formats are the same), so a resumed job continues its residuals and RNG streams
// on the GPU. A codec without a device kernel (powersgd, signum), DGC's momentum correction and
// builds without nvcc keep the CPU path: Encode / Decode return false. So do tensors under
// kDeviceMinNumel elements: each device call launches several kernels and synchronises a few
// times, which costs more than the host path's copy and encode for small tensors (LeNet, two
// workers on one H200: 6.8 ms of encode and 8.7 ms of decode a step on the device against
// 0.7 and 2.2 on the host, docs/gpu.md).
// Kernels run on CUDA's legacy default stream, ordered with LibTorch's default stream.
// Thread-safety: Encode for different keys, and Decode, may run concurrently.
#include <torch/types.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "common/codec_spec.h"
#include "compressors/compressor.h"

namespace gradpress::worker {

// The smallest tensor the device codecs take: 2^18 floats (1 MiB), where the host path's
// pageable copy and encode cost about what a device call's launches and synchronisations do.
constexpr int64_t kDeviceMinNumel = int64_t{1} << 18;

class DeviceCodecs {
 public:
  DeviceCodecs();
  ~DeviceCodecs();
  DeviceCodecs(const DeviceCodecs&) = delete;
  DeviceCodecs& operator=(const DeviceCodecs&) = delete;

  // Sizes the per-key table (Register); drops every device codec.
  void Reset(size_t keys);
  // Encodes key i's gradient g on the device with `spec` (the key's codec; `state_from` is its
  // CPU codec, whose state a new device codec starts from). False: take the CPU path.
  bool Encode(size_t i, const CodecSpec& spec, const compressors::Compressor& state_from,
              const torch::Tensor& g, const compressors::StepContext& ctx,
              compressors::Payload* out);
  // Decodes p into out when out is a contiguous float32 CUDA tensor. False: take the CPU path.
  bool Decode(const compressors::Payload& p, torch::Tensor* out);
  // Key i's device codec state (the CPU codec's format); false when it has none.
  bool SaveState(size_t i, std::string* out) const;
  // Sets every device codec's density (DGC's warm-up).
  void SetDensity(double ratio);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Host copies of CUDA tensors without a synchronising copy per tensor (the host codecs' path).
// CopyToHost replaces each defined CUDA tensor of *ts by a pinned float32 host copy: all
// copies are queued on the current stream and one wait per device follows the last, so the
// copies are complete on return; CPU tensors are left as they are.
void CopyToHost(std::vector<torch::Tensor>* ts);
// A pinned host float32 tensor of `sizes` from LibTorch's caching host allocator (CUDA builds
// only: call it for data bound for a CUDA tensor).
torch::Tensor PinnedFloats(at::IntArrayRef sizes);
// Queues the copy of pinned host `from` into CUDA tensor *to on the current stream and returns
// without waiting: the caching host allocator keeps `from`'s memory until the copy is done,
// and later work on the stream sees *to written.
void CopyFromHost(const torch::Tensor& from, torch::Tensor* to);

}  // namespace gradpress::worker
