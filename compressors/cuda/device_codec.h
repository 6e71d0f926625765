#pragma once
// Codecs on the GPU: encode a gradient in device memory straight into a payload in pinned host
// memory (ready for the wire), and decode a received payload into device memory, with the CPU
// codecs' wire formats (the server and CPU workers decode these payloads unchanged, and these
// decoders take theirs). No LibTorch here: device pointers and a CUDA stream.
//
//   auto codec = MakeDeviceCodec(ParseCodecShorthand("topk ratio=0.01 then=qsgd levels=16"));
//   PinnedBytes payload;
//   codec->Encode(d_grad, n, {"conv1.weight", step}, &payload, stream);  // payload.view()
//   codec->Decode(payload.view(), n, d_out, stream);                      // d_out on the GPU
//   const int* err = codec->DecodeAsync(payload.view(), n, d_out, stream);  // checked later
//
// Kernels exist for none, fp16, int8, qsgd, terngrad, onebit, topk, randomk, threshold,
// gaussiank and dgc, a sparsifier followed by a quantizer ("topk+qsgd"), error feedback (its
// residual stays on the device) and DGC's momentum correction (u and v on the device). qsgd
// encodes the fixed-width variant of its format (elias=false) on the GPU; an Elias-coded qsgd
// payload is decoded on the host and copied up.
// Encode returns once the payload is in *out; Decode once out is written. Both throw
// InvalidArgument: on NaN or Inf input where the CPU codec does, and on a truncated, extended
// or malformed payload (found on the host or by the kernels, which never write out of range).
// DecodeAsync returns without waiting: what the kernels find is left in a device word for the
// caller to read once the stream has passed it (then ThrowIfDecodeError).
// Thread-safety: one thread per instance (instances hold scratch buffers).
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/codec_spec.h"
#include "compressors/compressor.h"

struct CUstream_st;

namespace gradpress::compressors::cuda {

using Stream = CUstream_st*;  // cudaStream_t

// True when a CUDA device is present and usable.
bool DeviceAvailable();

// Page-locked host bytes (cudaHostAlloc), reused across calls; grows, never shrinks.
class PinnedBytes {
 public:
  PinnedBytes() = default;
  ~PinnedBytes();
  PinnedBytes(const PinnedBytes&) = delete;
  PinnedBytes& operator=(const PinnedBytes&) = delete;
  // Sets the size; contents are kept only when no reallocation is needed.
  void Resize(size_t n);
  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  std::string_view view() const { return {data_, size_}; }

 private:
  char* data_ = nullptr;
  size_t size_ = 0, capacity_ = 0;
};

class DeviceCodec {
 public:
  virtual ~DeviceCodec() = default;
  // Payload::codec of what Encode writes: "topk", "topk+qsgd".
  virtual std::string Name() const = 0;
  // Encodes in[0..n) (device memory) into *out (pinned host memory): EncodeAsync, then
  // EncodeFinish.
  void Encode(const float* in, int64_t n, const StepContext& ctx, PinnedBytes* out, Stream stream);
  // The encode in two halves. EncodeAsync queues its work on the stream, waiting only where
  // the host must learn a size first (a sparsifier that cannot guess its survivor count);
  // EncodeFinish waits for it and completes *out (and the codec's state), throwing what Encode
  // throws. Between them the caller may wait for something else, such as the point the
  // stream's work waits for; in, out, ctx.key and the stream stay valid until EncodeFinish.
  virtual void EncodeAsync(const float* in, int64_t n, const StepContext& ctx, PinnedBytes* out,
                           Stream stream) = 0;
  virtual void EncodeFinish() = 0;
  // Whether EncodeAsync of n elements queues all of its work without waiting for the stream.
  virtual bool QueuesWithoutWait(int64_t /*n*/) const { return true; }
  // Queues the decode of `bytes` (host memory; pinned is faster) into out[0..n) (device
  // memory) on the stream; `bytes` must stay unchanged until the stream has done it. Returns
  // the device word where the kernels record the first malformed content they find (a
  // DecodeError; 0 when none), valid until this instance's next call. What the host finds
  // malformed (sizes, header) throws at once.
  virtual const int* DecodeAsync(std::string_view bytes, int64_t n, float* out, Stream stream) = 0;
  // DecodeAsync, waited for: throws InvalidArgument "<codec>: <DecodeErrorText>" on an error.
  void Decode(std::string_view bytes, int64_t n, float* out, Stream stream);
  // e[0..n) -= D(the last payload Encode wrote), on the device from the device copy of that
  // payload (error feedback: e holds p = g + e, and becomes p - D(C(p))).
  virtual void SubtractDecoded(float* e, int64_t n, Stream stream) = 0;
  // Checkpoint state in the CPU codec's format (RNG streams, residuals): a checkpoint written
  // by a CPU worker loads here and the other way round.
  virtual void SaveState(std::string* out) const;
  virtual void LoadState(std::string_view in);
  // The fraction a sparsifier keeps (DGC's warm-up); false for a codec without one.
  virtual bool SetDensity(double /*ratio*/) { return false; }
};

// Throws InvalidArgument "<codec>: <DecodeErrorText>" when code (an error word's DecodeError,
// read back) is not 0.
void ThrowIfDecodeError(int code, const std::string& codec);

// Builds the device codec of a spec (codec, its `then` quantizer, error_feedback), reading the
// parameters as the CPU factory does: an unknown codec or parameter, a value out of range, or
// a codec with no device kernel (powersgd, signum, efsignsgd) throws InvalidArgument naming it.
std::unique_ptr<DeviceCodec> MakeDeviceCodec(const CodecSpec& spec);

// DGC's momentum correction (compressors/momentum_correction.h) around `inner`, with its u and
// v on the device and the CPU MomentumCorrection's state format; momentum in [0, 1).
std::unique_ptr<DeviceCodec> MakeDeviceMomentumCorrection(std::unique_ptr<DeviceCodec> inner,
                                                          double momentum);

// A device decoder for payloads named `name` ("qsgd", "topk+qsgd"): the formats describe
// themselves, so it needs no parameters.
std::unique_ptr<DeviceCodec> MakeDeviceDecoder(const std::string& name);

}  // namespace gradpress::compressors::cuda
