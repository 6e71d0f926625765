#pragma once
// The pieces the device codecs are built from (internal to compressors/cuda): device buffers,
// the decode-error word, the jump tables, and the two kinds of codec the factory composes:
// quantizers (fixed-size payloads: none, fp16, int8, qsgd, terngrad, onebit), which encode a
// dense array alone or as a sparsifier's kept values, and sparsifiers (topk, randomk,
// threshold, gaussiank, dgc), which are whole DeviceCodecs with an optional quantizer.
// Included by .cu files and by the host-only parts (device_codec.cc); needs no CUDA header.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "compressors/compressor_config.h"
#include "compressors/cuda/device_codec.h"

namespace gradpress::compressors::cuda {

// Throws Internal naming `what` when a CUDA call failed (err is a cudaError_t).
void CheckCuda(int err, const char* what);

// cudaMalloc'd bytes, reused; grows, never shrinks, contents not kept on growth.
class DeviceBytes {
 public:
  DeviceBytes() = default;
  ~DeviceBytes();
  DeviceBytes(const DeviceBytes&) = delete;
  DeviceBytes& operator=(const DeviceBytes&) = delete;
  void Reserve(size_t n);
  template <typename T>
  T* as(size_t count) {
    Reserve(count * sizeof(T));
    return reinterpret_cast<T*>(data_);
  }
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t capacity() const { return capacity_; }

 private:
  uint8_t* data_ = nullptr;
  size_t capacity_ = 0;
};

// The device word where kernels record the first decode (or encode) error, and its host check.
class ErrorWord {
 public:
  ErrorWord();
  ~ErrorWord();
  ErrorWord(const ErrorWord&) = delete;
  ErrorWord& operator=(const ErrorWord&) = delete;
  int* device() { return word_; }
  // Zeroes the word on the stream (before the kernels that may set it).
  void Clear(Stream stream);
  // Synchronises the stream; throws InvalidArgument "<codec>: <DecodeErrorText>" if set.
  void Check(Stream stream, const std::string& codec);

 private:
  int* word_ = nullptr;
};

// Device copies of the jump tables (rng_logic.h), built once per process.
const uint64_t* DeviceJumpTable64();
const uint32_t* DeviceJumpTable32();

// Copies host bytes to the device on the stream, staging through pinned memory when `bytes`
// is pageable; returns the device copy (valid until the next call on `into`).
const uint8_t* UploadBytes(std::string_view bytes, DeviceBytes* into, Stream stream);

// A slice of a quantizer's work: elements [begin, end) and the payload byte ranges that only
// this slice writes on encode (and that hold everything it reads on decode beyond what earlier
// slices' ranges hold). Slices let the codec copy one slice's bytes while the next one's
// kernels run; a range of 0 bytes is skipped.
struct PayloadSlice {
  int64_t begin = 0, end = 0;
  size_t offset[2] = {0, 0}, bytes[2] = {0, 0};
};
// Called with a slice's index: after its encode kernels are queued, before its decode ones.
using SliceHook = std::function<void(size_t slice)>;

// A quantizer on the device. Every device quantizer writes a payload whose size depends on n
// and its parameters only, so the host knows it before the kernels run.
class DeviceQuantizer {
 public:
  virtual ~DeviceQuantizer() = default;
  virtual std::string Name() const = 0;
  // Exact payload bytes for n elements.
  virtual size_t EncodedBytes(int64_t n) const = 0;
  // Writes EncodedBytes(n) bytes at out (device memory) on the stream, without synchronising.
  // Input errors (NaN/Inf where the CPU codec refuses them) set *err (ErrorWord::device()).
  virtual void EncodeAsync(const float* in, int64_t n, const StepContext& ctx, uint8_t* out,
                           int* err, Stream stream) = 0;
  // Validates what the host can see of `host_bytes` (its header and exact size for n; throws
  // InvalidArgument) and decodes the same bytes' device copy into out[0..n) on the stream;
  // content errors set *err. May synchronise (e.g. an Elias-coded qsgd decodes on the host).
  virtual void DecodeAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n,
                           float* out, int* err, Stream stream) = 0;
  // e[i] -= D(payload)[i] for the payload at dev_bytes (one this quantizer encoded).
  virtual void SubtractDecodedAsync(const uint8_t* dev_bytes, int64_t n, float* e,
                                    Stream stream) = 0;
  virtual void SaveState(std::string* out) const {}
  virtual void LoadState(std::string_view in);

  // The slices EncodeSlicedAsync runs for n elements, in order; their byte ranges cover the
  // payload exactly once. By default one slice: the whole payload.
  virtual std::vector<PayloadSlice> EncodeSlices(int64_t n) const;
  // EncodeAsync, slice by slice on the stream, calling done(c) once slice c's kernels are
  // queued (the caller may then copy its bytes on another stream after an event).
  virtual void EncodeSlicedAsync(const float* in, int64_t n, const StepContext& ctx, uint8_t* out,
                                 int* err, Stream stream, const SliceHook& done);
  // The slices DecodeSlicedAsync runs for the payload `host_bytes` of n elements; validates
  // what DecodeAsync validates on the host (throws InvalidArgument). By default one slice.
  virtual std::vector<PayloadSlice> DecodeSlices(std::string_view host_bytes, int64_t n) const;
  // DecodeAsync, slice by slice, calling ready(c) before queueing slice c's kernels (the caller
  // makes the stream wait there for the upload of slices 0..c). dev_bytes may still be arriving.
  virtual void DecodeSlicedAsync(std::string_view host_bytes, const uint8_t* dev_bytes, int64_t n,
                                 float* out, int* err, Stream stream, const SliceHook& ready);
};

// The quantizer named `name` with parameters from r (nullptr when `name` is not a device
// quantizer). quantizers.cu.
std::unique_ptr<DeviceQuantizer> MakeDeviceQuantizer(const std::string& name, ParamReader& r);

// A quantizer used alone as a codec (quantizer_codec.cu): copies overlap its slices' kernels.
std::unique_ptr<DeviceCodec> MakeQuantizerCodec(std::unique_ptr<DeviceQuantizer> q);

// The sparsifier named `name` with parameters from r, its kept values encoded by `then` when
// given (nullptr when `name` is not a device sparsifier). sparsifiers.cu.
std::unique_ptr<DeviceCodec> MakeDeviceSparsifier(const std::string& name, ParamReader& r,
                                                  std::unique_ptr<DeviceQuantizer> then);

}  // namespace gradpress::compressors::cuda
