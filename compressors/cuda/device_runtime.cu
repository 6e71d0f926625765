// The device codecs' runtime: buffers, the error word, jump tables, uploads, and the factory
// that composes quantizers (quantizers.cu), sparsifiers (sparsifiers.cu) and error feedback.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/device_parts.h"
#include "compressors/cuda/rng_logic.h"
#include "compressors/registry.h"

namespace gradpress::compressors::cuda {

void CheckCuda(int err, const char* what) {
  GP_ENFORCE_AS(Internal, err == cudaSuccess, "CUDA: ", what, ": ",
                cudaGetErrorString(static_cast<cudaError_t>(err)));
}

bool DeviceAvailable() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// ---- buffers ---------------------------------------------------------------------------

PinnedBytes::~PinnedBytes() {
  if (data_) cudaFreeHost(data_);
}

void PinnedBytes::Resize(size_t n) {
  if (n > capacity_) {
    const size_t grown = std::max(n, capacity_ + capacity_ / 2);
    if (data_) CheckCuda(cudaFreeHost(data_), "cudaFreeHost");
    data_ = nullptr;
    capacity_ = 0;
    void* p = nullptr;
    CheckCuda(cudaHostAlloc(&p, grown, cudaHostAllocDefault), "cudaHostAlloc (pinned payload)");
    data_ = static_cast<char*>(p);
    capacity_ = grown;
  }
  size_ = n;
}

DeviceBytes::~DeviceBytes() {
  if (data_) cudaFree(data_);
}

void DeviceBytes::Reserve(size_t n) {
  if (n <= capacity_) return;
  const size_t grown = std::max({n, capacity_ + capacity_ / 2, size_t{256}});
  if (data_) CheckCuda(cudaFree(data_), "cudaFree");
  data_ = nullptr;
  capacity_ = 0;
  void* p = nullptr;
  CheckCuda(cudaMalloc(&p, grown), "cudaMalloc (codec scratch)");
  data_ = static_cast<uint8_t*>(p);
  capacity_ = grown;
}

ErrorWord::ErrorWord() {
  void* d = nullptr;
  CheckCuda(cudaMalloc(&d, sizeof(int)), "cudaMalloc (error word)");
  word_ = static_cast<int*>(d);
}

ErrorWord::~ErrorWord() {
  if (word_) cudaFree(word_);
}

void ErrorWord::Clear(Stream stream) {
  CheckCuda(cudaMemsetAsync(word_, 0, sizeof(int), stream), "clear error word");
}

namespace {
// Waits for the stream and returns the error word's code.
int ReadErrorWord(const int* word, Stream stream) {
  int code = kDecodeOk;  // pageable: the copy returns once it is done, after the stream's work
  CheckCuda(cudaMemcpyAsync(&code, word, sizeof(int), cudaMemcpyDeviceToHost, stream),
            "read error word");
  CheckCuda(cudaStreamSynchronize(stream), "synchronise codec stream");
  return code;
}
}  // namespace

void ThrowIfDecodeError(int code, const std::string& codec) {
  GP_ENFORCE(code == kDecodeOk, codec, ": ", DecodeErrorText(code));
}

void ErrorWord::Check(Stream stream, const std::string& codec) {
  ThrowIfDecodeError(ReadErrorWord(word_, stream), codec);
}

void DeviceCodec::Encode(const float* in, int64_t n, const StepContext& ctx, PinnedBytes* out,
                         Stream stream) {
  EncodeAsync(in, n, ctx, out, stream);
  EncodeFinish();
}

void DeviceCodec::Decode(std::string_view bytes, int64_t n, float* out, Stream stream) {
  ThrowIfDecodeError(ReadErrorWord(DecodeAsync(bytes, n, out, stream), stream), Name());
}

// ---- jump tables -----------------------------------------------------------------------

namespace {
template <typename T>
const T* UploadOnce(const T* host, size_t count, const char* what) {
  void* d = nullptr;
  CheckCuda(cudaMalloc(&d, count * sizeof(T)), what);
  CheckCuda(cudaMemcpy(d, host, count * sizeof(T), cudaMemcpyHostToDevice), what);
  // A pageable copy may return before the DMA lands; kernels on other streams read it next.
  CheckCuda(cudaDeviceSynchronize(), what);
  return static_cast<const T*>(d);  // lives as long as the process
}
}  // namespace

const uint64_t* DeviceJumpTable64() {
  static const uint64_t* table =
      UploadOnce(HostJumpTable64(), kJumpTable64Size, "upload xorshift64 jump table");
  return table;
}

const uint32_t* DeviceJumpTable32() {
  static const uint32_t* table =
      UploadOnce(HostJumpTable32(), kJumpTable32Size, "upload xorshift32 jump table");
  return table;
}

const uint8_t* UploadBytes(std::string_view bytes, DeviceBytes* into, Stream stream) {
  uint8_t* dev = into->as<uint8_t>(std::max<size_t>(bytes.size(), 1));
  if (bytes.empty()) return dev;
  cudaPointerAttributes attr{};
  const bool pinned = cudaPointerGetAttributes(&attr, bytes.data()) == cudaSuccess &&
                      attr.type == cudaMemoryTypeHost;
  cudaGetLastError();  // a pageable pointer may leave an error behind on older drivers
  if (pinned) {
    CheckCuda(cudaMemcpyAsync(dev, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream),
              "upload payload");
    return dev;
  }
  // Pageable: stage through this thread's pinned buffer, synchronised before it is reused.
  thread_local PinnedBytes staging;
  staging.Resize(bytes.size());
  std::memcpy(staging.data(), bytes.data(), bytes.size());
  CheckCuda(cudaMemcpyAsync(dev, staging.data(), bytes.size(), cudaMemcpyHostToDevice, stream),
            "upload payload");
  CheckCuda(cudaStreamSynchronize(stream), "upload payload");
  return dev;
}

// ---- default state handling ------------------------------------------------------------

void DeviceCodec::SaveState(std::string* /*out*/) const {}

void DeviceCodec::LoadState(std::string_view in) {
  GP_ENFORCE(in.empty(), Name(), " keeps no state, but the checkpoint holds ", in.size(),
             " bytes of it (a different codec?)");
}

void DeviceQuantizer::LoadState(std::string_view in) {
  GP_ENFORCE(in.empty(), Name(), " keeps no state, but the checkpoint holds ", in.size(),
             " bytes of it (a different codec?)");
}

namespace {

__global__ void AddInto(const float* __restrict__ in, float* __restrict__ e, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    e[i] = in[i] + e[i];  // the CPU's corrected = in + residual, same operand order
  }
}

// Error feedback with the residual on the device: e <- g + e; send C(e); e <- e - D(C(e)).
// Bit for bit the CPU ErrorFeedback's residual (same float operations).
class DeviceErrorFeedback : public DeviceCodec {
 public:
  explicit DeviceErrorFeedback(std::unique_ptr<DeviceCodec> inner) : inner_(std::move(inner)) {}
  std::string Name() const override { return inner_->Name(); }

  void EncodeAsync(const float* in, int64_t n, const StepContext& ctx, PinnedBytes* out,
                   Stream stream) override {
    if (n_ < 0) {
      float* e = residual_.as<float>(std::max<int64_t>(n, 1));
      CheckCuda(cudaMemsetAsync(e, 0, n * sizeof(float), stream), "zero residual");
      n_ = n;
    }
    GP_ENFORCE(n == n_, Name(), " with error feedback: tensor has ", n, " elements, the residual ",
               n_);
    float* e = residual_.as<float>(std::max<int64_t>(n, 1));
    stream_ = stream;
    if (n > 0) {
      const int blocks = static_cast<int>(std::min<int64_t>((n + 255) / 256, 4096));
      AddInto<<<blocks, 256, 0, stream>>>(in, e, n);
      CheckCuda(cudaGetLastError(), "error feedback: add residual");
    }
    inner_->EncodeAsync(e, n, ctx, out, stream);
  }

  bool QueuesWithoutWait(int64_t n) const override { return inner_->QueuesWithoutWait(n); }

  void EncodeFinish() override {
    inner_->EncodeFinish();
    // e - D(C(e)), queued on the encode's stream (SubtractDecoded reads the finished payload).
    inner_->SubtractDecoded(residual_.as<float>(std::max<int64_t>(n_, 1)), n_, stream_);
  }

  const int* DecodeAsync(std::string_view bytes, int64_t n, float* out, Stream stream) override {
    return inner_->DecodeAsync(bytes, n, out, stream);
  }

  void SubtractDecoded(float* e, int64_t n, Stream stream) override {
    inner_->SubtractDecoded(e, n, stream);
  }

  // The CPU ErrorFeedback's format: varint numel, the residual's floats, the inner state.
  void SaveState(std::string* out) const override {
    const int64_t n = std::max<int64_t>(n_, 0);
    ByteWriter w(out);
    w.PutVarint(static_cast<uint64_t>(n));
    char* dst = w.Extend(static_cast<size_t>(n) * sizeof(float));
    // The residual's last update (SubtractDecoded) may still be queued on the encode's stream.
    CheckCuda(cudaStreamSynchronize(stream_), "error feedback: synchronise before saving");
    if (n > 0) {
      CheckCuda(cudaMemcpy(dst, residual_.data(), n * sizeof(float), cudaMemcpyDeviceToHost),
                "save residual");
    }
    inner_->SaveState(out);
  }

  void LoadState(std::string_view in) override {
    ByteReader r(in, "error feedback state");
    const uint64_t n = r.GetVarint("residual numel");
    GP_ENFORCE(n <= in.size() / sizeof(float), "error feedback state: residual of ", n,
               " floats in ", in.size(), " bytes");
    std::string_view bytes = r.GetBytes(n * sizeof(float), "residual");
    inner_->LoadState(r.Rest());
    CheckCuda(cudaStreamSynchronize(stream_), "error feedback: synchronise before loading");
    float* e = residual_.as<float>(std::max<uint64_t>(n, 1));
    if (n > 0) {
      CheckCuda(cudaMemcpy(e, bytes.data(), bytes.size(), cudaMemcpyHostToDevice), "load residual");
      // A pageable copy may return before the DMA lands; the next encode's stream reads it.
      CheckCuda(cudaDeviceSynchronize(), "load residual");
    }
    n_ = n > 0 ? static_cast<int64_t>(n) : -1;
  }

  bool SetDensity(double ratio) override { return inner_->SetDensity(ratio); }

 private:
  std::unique_ptr<DeviceCodec> inner_;
  DeviceBytes residual_;
  int64_t n_ = -1;           // the residual's numel, fixed by the first encode (or a loaded state)
  Stream stream_ = nullptr;  // the last encode's, where the residual's updates are queued
};

}  // namespace

std::unique_ptr<DeviceCodec> MakeDeviceCodec(const CodecSpec& spec) {
  ParamReader r(spec);
  std::unique_ptr<DeviceCodec> codec;
  if (auto q = MakeDeviceQuantizer(spec.codec, r)) {
    GP_ENFORCE(!spec.then, "'then' follows a sparsifier (topk, randomk, threshold, gaussiank, ",
               "dgc); '", spec.codec, "' is not one");
    codec = MakeQuantizerCodec(std::move(q));
  } else {
    std::unique_ptr<DeviceQuantizer> then;
    if (spec.then) {
      GP_ENFORCE(!spec.then->error_feedback, "error_feedback belongs on the outer codec, not on '",
                 spec.then->codec, "' after 'then'");
      ParamReader tr(*spec.then);
      then = MakeDeviceQuantizer(spec.then->codec, tr);
      GP_ENFORCE(then != nullptr, "'then=", spec.then->codec,
                 "' has no GPU kernel; on the GPU a sparsifier is followed by none, fp16, int8, ",
                 "qsgd, terngrad or onebit");
      tr.Finish();
    }
    codec = MakeDeviceSparsifier(spec.codec, r, std::move(then));
    GP_ENFORCE(codec != nullptr, "codec '", spec.codec,
               "' has no GPU kernel; GPU codecs: none, fp16, int8, qsgd, terngrad, onebit, topk, ",
               "randomk, threshold, gaussiank, dgc");
  }
  r.Finish();
  if (spec.error_feedback) codec = std::make_unique<DeviceErrorFeedback>(std::move(codec));
  return codec;
}

std::unique_ptr<DeviceCodec> MakeDeviceDecoder(const std::string& name) {
  return MakeDeviceCodec(DecoderSpec(name));
}

}  // namespace gradpress::compressors::cuda
