// DeviceMomentumCorrection: DGC's momentum correction (compressors/momentum_correction.h) with
// u and v on the device, around a device sparsifier (optionally followed by a quantizer). The
// payload is decoded again on the device to update u and v exactly as the CPU does from its own
// decode; state is the CPU's format (varint numel, u, v, the inner codec's state).
#include <cuda_runtime.h>

#include <algorithm>
#include <memory>
#include <string>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/cuda/device_codec.h"
#include "compressors/cuda/device_parts.h"
#include "compressors/cuda/momentum_logic.h"
#include "compressors/cuda/quantizer_kernels.cuh"

namespace gradpress::compressors::cuda {
namespace {

__global__ void AccumulateKernel(const float* __restrict__ g, float* __restrict__ u,
                                 float* __restrict__ v, int64_t n, float m) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    MomentumAccumulate(m, g[i], &u[i], &v[i]);
}

__global__ void SentKernel(const float* __restrict__ s, float* __restrict__ u,
                           float* __restrict__ v, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    MomentumSent(s[i], &u[i], &v[i]);
}

class DeviceMomentumCorrection : public DeviceCodec {
 public:
  DeviceMomentumCorrection(std::unique_ptr<DeviceCodec> inner, float momentum)
      : inner_(std::move(inner)), decoder_(MakeDeviceDecoder(inner_->Name())), m_(momentum) {}
  std::string Name() const override { return inner_->Name(); }

  void EncodeAsync(const float* in, int64_t n, const StepContext& ctx, PinnedBytes* out,
                   Stream stream) override {
    if (n_ < 0) Zero(n, stream);
    GP_ENFORCE(n == n_, Name(), " with momentum correction: tensor has ", n,
               " elements, the state ", n_);
    stream_ = stream;
    if (n > 0) {
      AccumulateKernel<<<GridFor(n), kBlockThreads, 0, AsCuda(stream)>>>(in, U(), V(), n, m_);
      CheckCuda(cudaGetLastError(), "momentum correction: accumulate");
    }
    inner_->EncodeAsync(V(), n, ctx, out, stream);
    out_ = out;
  }

  bool QueuesWithoutWait(int64_t n) const override { return inner_->QueuesWithoutWait(n); }

  void EncodeFinish() override {
    inner_->EncodeFinish();
    // What the receivers decode, from the pinned payload: v loses it, u where it is nonzero.
    const int64_t n = n_;
    float* sent = sent_.as<float>(std::max<int64_t>(n, 1));
    decoder_->Decode(out_->view(), n, sent, stream_);
    if (n > 0) {
      SentKernel<<<GridFor(n), kBlockThreads, 0, AsCuda(stream_)>>>(sent, U(), V(), n);
      CheckCuda(cudaGetLastError(), "momentum correction: subtract the sent part");
    }
  }

  const int* DecodeAsync(std::string_view bytes, int64_t n, float* out, Stream stream) override {
    return inner_->DecodeAsync(bytes, n, out, stream);
  }

  void SubtractDecoded(float*, int64_t, Stream) override {
    GP_ENFORCE_AS(Internal, false, Name(),
                  ": momentum correction is the outermost codec, "
                  "never inside error feedback");
  }

  void SaveState(std::string* out) const override {
    const int64_t n = std::max<int64_t>(n_, 0);
    ByteWriter w(out);
    w.PutVarint(static_cast<uint64_t>(n));
    // u and v's last update (SentKernel) may still be queued on the encode's stream.
    CheckCuda(cudaStreamSynchronize(AsCuda(stream_)), "momentum correction: synchronise");
    const size_t bytes = static_cast<size_t>(n) * sizeof(float);
    char* dst = w.Extend(2 * bytes);
    if (n > 0) {
      CheckCuda(cudaMemcpy(dst, state_.data(), 2 * bytes, cudaMemcpyDeviceToHost), "save u, v");
    }
    inner_->SaveState(out);
  }

  void LoadState(std::string_view in) override {
    ByteReader r(in, "momentum correction state");
    const uint64_t n = r.GetVarint("numel");
    GP_ENFORCE(n <= in.size() / (2 * sizeof(float)), "momentum correction state: ", n,
               " elements in ", in.size(), " bytes");
    const std::string_view uv = r.GetBytes(2 * n * sizeof(float), "u and v");
    inner_->LoadState(r.Rest());
    CheckCuda(cudaStreamSynchronize(AsCuda(stream_)), "momentum correction: synchronise");
    state_.Reserve(std::max<size_t>(uv.size(), sizeof(float)));
    if (n > 0) {
      CheckCuda(cudaMemcpy(state_.data(), uv.data(), uv.size(), cudaMemcpyHostToDevice),
                "load u, v");
      // A pageable copy may return before the DMA lands; the next encode's stream reads it.
      CheckCuda(cudaDeviceSynchronize(), "load u, v");
    }
    n_ = n > 0 ? static_cast<int64_t>(n) : -1;
  }

  bool SetDensity(double ratio) override { return inner_->SetDensity(ratio); }

 private:
  // u then v, n floats each, in one buffer (the state's layout).
  float* U() { return state_.as<float>(2 * std::max<int64_t>(n_, 1)); }
  float* V() { return U() + n_; }
  void Zero(int64_t n, Stream stream) {
    n_ = n;
    CheckCuda(cudaMemsetAsync(U(), 0, 2 * static_cast<size_t>(n) * sizeof(float), AsCuda(stream)),
              "zero u, v");
  }

  std::unique_ptr<DeviceCodec> inner_, decoder_;
  float m_;
  DeviceBytes state_, sent_;
  int64_t n_ = -1;              // fixed by the first encode (or a loaded state)
  Stream stream_ = nullptr;     // the last encode's, where u and v's updates are queued
  PinnedBytes* out_ = nullptr;  // the payload of the encode EncodeFinish completes
};

}  // namespace

std::unique_ptr<DeviceCodec> MakeDeviceMomentumCorrection(std::unique_ptr<DeviceCodec> inner,
                                                          double momentum) {
  GP_ENFORCE_AS(Internal, inner != nullptr, "momentum correction needs a codec");
  GP_ENFORCE(momentum >= 0 && momentum < 1, "momentum correction: momentum ", momentum,
             " is not in [0, 1)");
  return std::make_unique<DeviceMomentumCorrection>(std::move(inner), static_cast<float>(momentum));
}

}  // namespace gradpress::compressors::cuda
