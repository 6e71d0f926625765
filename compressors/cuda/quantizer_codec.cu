// A quantizer used alone as a DeviceCodec (MakeQuantizerCodec, device_parts.h), and the
// default single-slice DeviceQuantizer::*Sliced* methods.
//
// Encode copies each slice's payload bytes to pinned memory on a second stream as soon as that
// slice's kernels are done, while the next slice's kernels run on the codec's stream; Decode
// uploads slice c + 1 while slice c decodes. Copy and kernels then overlap instead of adding
// up. The payload stays on the device for SubtractDecoded.
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "compressors/cuda/device_parts.h"

namespace gradpress::compressors::cuda {

std::vector<PayloadSlice> DeviceQuantizer::EncodeSlices(int64_t n) const {
  PayloadSlice all;
  all.end = n;
  all.bytes[0] = EncodedBytes(n);
  return {all};
}

void DeviceQuantizer::EncodeSlicedAsync(const float* in, int64_t n, const StepContext& ctx,
                                        uint8_t* out, int* err, Stream stream,
                                        const SliceHook& done) {
  EncodeAsync(in, n, ctx, out, err, stream);
  done(0);
}

std::vector<PayloadSlice> DeviceQuantizer::DecodeSlices(std::string_view host_bytes,
                                                        int64_t n) const {
  PayloadSlice all;
  all.end = n;
  all.bytes[0] = host_bytes.size();
  return {all};
}

void DeviceQuantizer::DecodeSlicedAsync(std::string_view host_bytes, const uint8_t* dev_bytes,
                                        int64_t n, float* out, int* err, Stream stream,
                                        const SliceHook& ready) {
  ready(0);
  DecodeAsync(host_bytes, dev_bytes, n, out, err, stream);
}

namespace {

bool IsPinned(const void* p) {
  cudaPointerAttributes attr{};
  const bool pinned =
      cudaPointerGetAttributes(&attr, p) == cudaSuccess && attr.type == cudaMemoryTypeHost;
  cudaGetLastError();  // a pageable pointer may leave an error behind on older drivers
  return pinned;
}

class QuantizerCodec : public DeviceCodec {
 public:
  explicit QuantizerCodec(std::unique_ptr<DeviceQuantizer> q) : q_(std::move(q)) {}
  ~QuantizerCodec() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
    if (joined_) cudaEventDestroy(joined_);
    if (copy_) cudaStreamDestroy(copy_);
  }
  std::string Name() const override { return q_->Name(); }

  void EncodeAsync(const float* in, int64_t n, const StepContext& ctx, PinnedBytes* out,
                   Stream stream) override {
    const size_t size = q_->EncodedBytes(n);
    uint8_t* dev = payload_.as<uint8_t>(std::max<size_t>(size, 1));
    const std::vector<PayloadSlice> slices = q_->EncodeSlices(n);
    Prepare(slices.size());
    out->Resize(size);
    error_.Clear(stream);
    last_n_ = -1;
    char* host = out->data();
    Guarded([&] {
      q_->EncodeSlicedAsync(in, n, ctx, dev, error_.device(), stream, [&](size_t c) {
        GP_ENFORCE_AS(Internal, c < slices.size(), Name(), ": encode slice ", c, " of ",
                      slices.size());
        CheckCuda(cudaEventRecord(events_[c], stream), "record encode slice");
        CheckCuda(cudaStreamWaitEvent(copy_, events_[c], 0), "wait for encode slice");
        for (int r = 0; r < 2; ++r) {
          const PayloadSlice& s = slices[c];
          if (s.bytes[r] == 0) continue;
          GP_ENFORCE_AS(Internal, s.offset[r] + s.bytes[r] <= size, Name(), ": slice range");
          CheckCuda(cudaMemcpyAsync(host + s.offset[r], dev + s.offset[r], s.bytes[r],
                                    cudaMemcpyDeviceToHost, copy_),
                    "copy payload slice to pinned memory");
        }
      });
    });
    Join(stream);
    pending_n_ = n;
    pending_stream_ = stream;
  }

  void EncodeFinish() override {
    GP_ENFORCE_AS(Internal, pending_n_ >= 0, Name(), ": EncodeFinish without EncodeAsync");
    const int64_t n = pending_n_;
    pending_n_ = -1;
    error_.Check(pending_stream_, Name());  // synchronises the stream, which waited for the copies
    last_n_ = n;
  }

  const int* DecodeAsync(std::string_view bytes, int64_t n, float* out, Stream stream) override {
    if (bytes.empty() || !IsPinned(bytes.data())) {
      // Pageable bytes are staged whole (UploadBytes); slicing gains nothing there.
      const uint8_t* dev = UploadBytes(bytes, &upload_, stream);
      error_.Clear(stream);
      q_->DecodeAsync(bytes, dev, n, out, error_.device(), stream);
      return error_.device();
    }
    const std::vector<PayloadSlice> slices = q_->DecodeSlices(bytes, n);  // validates
    Prepare(slices.size());
    uint8_t* dev = upload_.as<uint8_t>(bytes.size());
    error_.Clear(stream);
    // The uploads overwrite upload_, which work queued earlier on the stream may still read.
    CheckCuda(cudaEventRecord(joined_, stream), "record decode start");
    CheckCuda(cudaStreamWaitEvent(copy_, joined_, 0), "wait for decode start");
    for (size_t c = 0; c < slices.size(); ++c) {
      const PayloadSlice& s = slices[c];
      for (int r = 0; r < 2; ++r) {
        if (s.bytes[r] == 0) continue;
        GP_ENFORCE_AS(Internal, s.offset[r] + s.bytes[r] <= bytes.size(), Name(), ": slice range");
        CheckCuda(cudaMemcpyAsync(dev + s.offset[r], bytes.data() + s.offset[r], s.bytes[r],
                                  cudaMemcpyHostToDevice, copy_),
                  "upload payload slice");
      }
      CheckCuda(cudaEventRecord(events_[c], copy_), "record upload slice");
    }
    Guarded([&] {
      q_->DecodeSlicedAsync(bytes, dev, n, out, error_.device(), stream, [&](size_t c) {
        GP_ENFORCE_AS(Internal, c < slices.size(), Name(), ": decode slice ", c, " of ",
                      slices.size());
        CheckCuda(cudaStreamWaitEvent(stream, events_[c], 0), "wait for upload slice");
      });
    });
    Join(stream);
    return error_.device();
  }

  void SubtractDecoded(float* e, int64_t n, Stream stream) override {
    GP_ENFORCE_AS(Internal, n == last_n_, Name(), ": SubtractDecoded of ", n,
                  " elements without an encode of as many");
    q_->SubtractDecodedAsync(payload_.data(), n, e, stream);
  }

  void SaveState(std::string* out) const override { q_->SaveState(out); }
  void LoadState(std::string_view in) override { q_->LoadState(in); }

 private:
  // The copy stream and one event per slice, made at first use (no device needed before).
  void Prepare(size_t slices) {
    if (!copy_) {
      CheckCuda(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "create copy stream");
      CheckCuda(cudaEventCreateWithFlags(&joined_, cudaEventDisableTiming), "create event");
    }
    while (events_.size() < slices) {
      cudaEvent_t e = nullptr;
      CheckCuda(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "create event");
      events_.push_back(e);
    }
  }
  // Runs f; when it throws, first lets the copies already queued finish (they read or write
  // buffers the caller may free or the next call may overwrite).
  template <typename F>
  void Guarded(F&& f) {
    try {
      f();
    } catch (...) {
      cudaStreamSynchronize(copy_);
      throw;
    }
  }
  // The stream waits for everything queued on the copy stream.
  void Join(Stream stream) {
    CheckCuda(cudaEventRecord(joined_, copy_), "record copies done");
    CheckCuda(cudaStreamWaitEvent(stream, joined_, 0), "wait for copies");
  }

  std::unique_ptr<DeviceQuantizer> q_;
  DeviceBytes payload_, upload_;
  ErrorWord error_;
  int64_t last_n_ = -1;
  int64_t pending_n_ = -1;  // an encode queued by EncodeAsync, not yet finished
  Stream pending_stream_ = nullptr;
  cudaStream_t copy_ = nullptr;
  cudaEvent_t joined_ = nullptr;
  std::vector<cudaEvent_t> events_;
};

}  // namespace

std::unique_ptr<DeviceCodec> MakeQuantizerCodec(std::unique_ptr<DeviceQuantizer> q) {
  return std::make_unique<QuantizerCodec>(std::move(q));
}

}  // namespace gradpress::compressors::cuda
