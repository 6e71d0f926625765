// DeviceCodecs (device_codecs.h): compressors/cuda behind the worker's codec calls. Without
// nvcc (GP_WORKER_CUDA unset) every call answers "take the CPU path".
#include "worker/device_codecs.h"

#include <map>
#include <mutex>
#include <vector>

#include "common/error.h"

#ifdef GP_WORKER_CUDA
#include "compressors/cuda/device_codec.h"
#endif

namespace gradpress::worker {

using compressors::Payload;

#ifdef GP_WORKER_CUDA

namespace cuda = compressors::cuda;

namespace {
bool OnDevice(const torch::Tensor& t) {
  return t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() &&
         t.numel() >= kDeviceMinNumel;
}
}  // namespace

struct DeviceCodecs::Impl {
  struct Key {
    std::unique_ptr<cuda::DeviceCodec> codec;
    bool host_only = false;  // no device kernel for its spec: never tried again
    cuda::PinnedBytes payload;
  };
  std::vector<std::unique_ptr<Key>> keys;  // PinnedBytes does not move
  std::mutex decoders_mu;  // decoders are shared by the buckets' threads, one call at a time
  std::map<std::string, std::unique_ptr<cuda::DeviceCodec>> decoders;
  std::map<std::string, bool> undecodable;  // codecs without a device decoder
  double density = 0;                       // > 0: the last SetDensity, for codecs made later
};

DeviceCodecs::DeviceCodecs() : impl_(std::make_unique<Impl>()) {}
DeviceCodecs::~DeviceCodecs() = default;

void DeviceCodecs::Reset(size_t keys) {
  impl_->keys.clear();
  for (size_t i = 0; i < keys; ++i) impl_->keys.push_back(std::make_unique<Impl::Key>());
}

bool DeviceCodecs::Encode(size_t i, const CodecSpec& spec,
                          const compressors::Compressor& state_from, const torch::Tensor& g,
                          const compressors::StepContext& ctx, Payload* out) {
  if (!OnDevice(g) || i >= impl_->keys.size()) return false;
  Impl::Key& key = *impl_->keys[i];
  if (key.host_only) return false;
  if (!key.codec) {
    try {
      key.codec = cuda::MakeDeviceCodec(spec);
    } catch (const InvalidArgument&) {  // no device kernel for this codec: the CPU path
      key.host_only = true;
      return false;
    }
    std::string state;
    state_from.SaveState(&state);
    key.codec->LoadState(state);
    if (impl_->density > 0) key.codec->SetDensity(impl_->density);
  }
  key.codec->Encode(g.data_ptr<float>(), g.numel(), ctx, &key.payload, nullptr);
  out->codec = key.codec->Name();
  out->shape = g.sizes().vec();
  out->dtype = compressors::DType::kFloat32;
  out->bytes.assign(key.payload.data(), key.payload.size());
  return true;
}

bool DeviceCodecs::Decode(const Payload& p, torch::Tensor* out) {
  if (!OnDevice(*out)) return false;
  std::lock_guard<std::mutex> lock(impl_->decoders_mu);
  if (impl_->undecodable.count(p.codec)) return false;
  auto& d = impl_->decoders[p.codec];
  if (!d) {
    try {
      d = cuda::MakeDeviceDecoder(p.codec);
    } catch (const InvalidArgument&) {  // e.g. powersgd: decoded on the host
      impl_->decoders.erase(p.codec);
      impl_->undecodable[p.codec] = true;
      return false;
    }
  }
  d->Decode(p.bytes, out->numel(), out->data_ptr<float>(), nullptr);
  return true;
}

bool DeviceCodecs::SaveState(size_t i, std::string* out) const {
  if (i >= impl_->keys.size() || !impl_->keys[i]->codec) return false;
  impl_->keys[i]->codec->SaveState(out);
  return true;
}

void DeviceCodecs::SetDensity(double ratio) {
  impl_->density = ratio;
  for (auto& key : impl_->keys)
    if (key->codec) key->codec->SetDensity(ratio);
}

#else  // no CUDA codecs in this build

struct DeviceCodecs::Impl {};
DeviceCodecs::DeviceCodecs() = default;
DeviceCodecs::~DeviceCodecs() = default;
void DeviceCodecs::Reset(size_t) {}
bool DeviceCodecs::Encode(size_t, const CodecSpec&, const compressors::Compressor&,
                          const torch::Tensor&, const compressors::StepContext&, Payload*) {
  return false;
}
bool DeviceCodecs::Decode(const Payload&, torch::Tensor*) { return false; }
bool DeviceCodecs::SaveState(size_t, std::string*) const { return false; }
void DeviceCodecs::SetDensity(double) {}

#endif

void CopyToHost(std::vector<torch::Tensor>* ts) {
  std::map<int, size_t> last;  // per CUDA device, the last tensor on it: its copy waits
  for (size_t j = 0; j < ts->size(); ++j)
    if ((*ts)[j].defined() && (*ts)[j].is_cuda()) last[(*ts)[j].device().index()] = j;
  for (size_t j = 0; j < ts->size(); ++j) {
    torch::Tensor& t = (*ts)[j];
    if (!t.defined() || !t.is_cuda()) continue;
    torch::Tensor h = PinnedFloats(t.sizes());
    h.copy_(t.detach(), /*non_blocking=*/last[t.device().index()] != j);
    t = h;
  }
}

torch::Tensor PinnedFloats(at::IntArrayRef sizes) {
  return torch::empty(sizes, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(true));
}

void CopyFromHost(const torch::Tensor& from, torch::Tensor* to) {
  to->copy_(from.view(to->sizes()), /*non_blocking=*/true);
}

}  // namespace gradpress::worker
