// DeviceCodecs, CudaMark (device_codecs.h): compressors/cuda behind the worker's codec calls.
// Without nvcc (GP_WORKER_CUDA unset) every codec call answers "take the CPU path".
#include "worker/client/device_codecs.h"

#include <cstring>
#include <map>
#include <optional>
#include <vector>

#include "common/error.h"

#ifdef GP_WORKER_CUDA
#include "compressors/cuda/device_codec.h"
#include "compressors/cuda/device_stream.h"
#endif

namespace gradpress::worker {

using compressors::Payload;

namespace {
bool ContiguousFloatCuda(const torch::Tensor& t) {
  return t.is_cuda() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
}
bool OnDevice(const torch::Tensor& t) {
  return ContiguousFloatCuda(t) && t.numel() >= kDeviceMinNumel;
}
}  // namespace

void DecodeChecks::Add(std::function<void()> check) {
  std::lock_guard<std::mutex> lock(mu_);
  checks_.push_back(std::move(check));
}

void DecodeChecks::Check() {
  std::vector<std::function<void()>> checks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    checks.swap(checks_);
  }
  for (const auto& check : checks) check();
}

void DecodeChecks::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  checks_.clear();
}

#ifdef GP_WORKER_CUDA

namespace cuda = compressors::cuda;

struct CudaMark::Impl {
  std::unique_ptr<cuda::StreamMark> mark;  // made on the first Record (needs a device)
};

CudaMark::CudaMark() : impl_(std::make_unique<Impl>()) {}
CudaMark::~CudaMark() = default;
void CudaMark::Record() {
  if (!impl_->mark) impl_->mark = std::make_unique<cuda::StreamMark>();
  impl_->mark->Record();
}
void CudaMark::Reset() {
  if (impl_->mark) impl_->mark->Reset();
}
void CudaMark::Wait() const {
  if (impl_->mark) impl_->mark->Wait();
}
bool CudaMark::Passed() const { return !impl_->mark || impl_->mark->Passed(); }
bool CudaMark::recorded() const { return impl_->mark && impl_->mark->recorded(); }

struct DeviceCodecs::Impl {
  // A decode's end on its side stream, and what its kernels found (DecodeError), read back.
  struct Decoded {
    cuda::StreamMark done;
    cuda::PinnedBytes word;
    void Check(const std::string& codec) const {
      done.Wait();
      int code = 0;
      std::memcpy(&code, word.data(), sizeof(code));
      cuda::ThrowIfDecodeError(code, codec);
    }
  };
  struct Key {
    std::unique_ptr<cuda::SideStream> stream;  // made on first use
    std::unique_ptr<cuda::DeviceCodec> codec;
    bool host_only = false;     // no device kernel for its spec: never tried again
    cuda::PinnedBytes payload;  // the last encode's
    std::optional<std::vector<int64_t>> encoding;  // the shape of an encode not yet finished
    cuda::PinnedBytes upload;                      // the payload being decoded
    std::string decoder_name;  // the codec `decoder` decodes, or one without a device decoder
    std::unique_ptr<cuda::DeviceCodec> decoder;
    torch::Tensor scratch;  // a device decode's output, copied into the destination
    std::unique_ptr<cuda::StreamMark> copied;  // that copy, queued on the default stream
    std::shared_ptr<Decoded> decoded;          // the last decode (a later check shares it)

    ~Key() {
      try {
        if (decoded) decoded->done.Wait();  // its upload still reads `upload`
      } catch (...) {                       // a failed context: nothing left to wait for
      }
    }

    cuda::SideStream& Stream() {  // made on first use: CPU-only runs create no CUDA objects
      if (!stream) {
        stream = std::make_unique<cuda::SideStream>();
        copied = std::make_unique<cuda::StreamMark>();
      }
      return *stream;
    }
    // The side stream, set to start after `ready` (or all work queued so far).
    cuda::SideStream& StreamAfter(const CudaMark* ready) {
      cuda::SideStream& s = Stream();
      if (ready && ready->recorded()) {
        s.After(*ready->impl_->mark);
      } else {
        s.AfterDefault();
      }
      return s;
    }
  };
  std::vector<std::unique_ptr<Key>> keys;  // PinnedBytes does not move
  double density = 0;                      // > 0: the last SetDensity, for codecs made later
};

DeviceCodecs::DeviceCodecs() : impl_(std::make_unique<Impl>()) {}
DeviceCodecs::~DeviceCodecs() = default;

void DeviceCodecs::Reset(size_t keys) {
  impl_->keys.clear();
  for (size_t i = 0; i < keys; ++i) impl_->keys.push_back(std::make_unique<Impl::Key>());
}

bool DeviceCodecs::EncodeAsync(size_t i, const CodecSpec& spec, double momentum,
                               const compressors::Compressor& state_from, const torch::Tensor& g,
                               const compressors::StepContext& ctx, const CudaMark* ready,
                               const std::function<void()>& wait_ready) {
  if (!OnDevice(g) || i >= impl_->keys.size()) return false;
  Impl::Key& key = *impl_->keys[i];
  if (key.host_only) return false;
  if (!key.codec) {
    try {
      key.codec = cuda::MakeDeviceCodec(spec);
      if (momentum > 0)
        key.codec = cuda::MakeDeviceMomentumCorrection(std::move(key.codec), momentum);
    } catch (const InvalidArgument&) {  // no device kernel for this codec: the CPU path
      key.host_only = true;
      return false;
    }
    std::string state;
    state_from.SaveState(&state);
    key.codec->LoadState(state);
    if (impl_->density > 0) key.codec->SetDensity(impl_->density);
  }
  GP_ENFORCE_AS(Internal, !key.encoding, "DeviceCodecs: key ", i,
                " encoded again before its EncodeFinish");
  if (!key.codec->QueuesWithoutWait(g.numel())) wait_ready();  // its waits: the codec's alone
  cuda::SideStream& stream = key.StreamAfter(ready);
  key.codec->EncodeAsync(g.data_ptr<float>(), g.numel(), ctx, &key.payload, stream.get());
  key.encoding = g.sizes().vec();
  return true;
}

void DeviceCodecs::EncodeFinish(size_t i, Payload* out) {
  GP_ENFORCE_AS(Internal, i < impl_->keys.size() && impl_->keys[i]->encoding,
                "DeviceCodecs: EncodeFinish(", i, ") without EncodeAsync");
  Impl::Key& key = *impl_->keys[i];
  std::vector<int64_t> shape = std::move(*key.encoding);
  key.encoding.reset();
  key.codec->EncodeFinish();
  out->codec = key.codec->Name();
  out->shape = std::move(shape);
  out->dtype = compressors::DType::kFloat32;
  out->bytes.assign(key.payload.data(), key.payload.size());
}

bool DeviceCodecs::Decode(size_t i, const Payload& p, torch::Tensor* out, DecodeChecks* later) {
  if (!OnDevice(*out) || i >= impl_->keys.size()) return false;
  Impl::Key& key = *impl_->keys[i];
  if (key.decoder_name != p.codec) {
    key.decoder_name = p.codec;
    try {
      key.decoder = cuda::MakeDeviceDecoder(p.codec);
    } catch (const InvalidArgument&) {  // e.g. powersgd: decoded on the host
      key.decoder.reset();
    }
  }
  if (!key.decoder) return false;
  cuda::SideStream& stream = key.Stream();
  if (!key.decoded) {
    key.decoded = std::make_shared<Impl::Decoded>();
    key.decoded->word.Resize(sizeof(int));
  }
  Impl::Decoded& decoded = *key.decoded;
  decoded.done.Wait();  // the last decode's upload and error word are free (usually long done)
  if (!key.scratch.defined() || key.scratch.numel() != out->numel()) {
    // LibTorch's allocator may hand out memory that work queued on its stream still reads.
    key.scratch = torch::empty({out->numel()}, out->options());
    stream.AfterDefault();
  }
  // The scratch is free once the default stream has done the last decode's copy out of it.
  stream.After(*key.copied);
  // From pinned memory the payload goes up without a wait of its own (a pageable one is staged
  // and waited for).
  key.upload.Resize(p.bytes.size());
  if (!p.bytes.empty()) std::memcpy(key.upload.data(), p.bytes.data(), p.bytes.size());
  const int* word = key.decoder->DecodeAsync(key.upload.view(), out->numel(),
                                             key.scratch.data_ptr<float>(), stream.get());
  cuda::CopyAsync(decoded.word.data(), word, sizeof(int), stream.get());
  decoded.done.Record(stream.get());
  // Into the destination on the default stream, after the decode, if it found no error.
  decoded.done.Before(nullptr);
  cuda::CopyFloatsIfClear(out->data_ptr<float>(), key.scratch.data_ptr<float>(), out->numel(), word,
                          nullptr);
  key.copied->Record(nullptr);
  if (later) {
    later->Add([d = key.decoded, codec = p.codec] { d->Check(codec); });
  } else {
    decoded.Check(p.codec);
  }
  return true;
}

void DeviceCodecs::CopyToHost(size_t first, std::vector<torch::Tensor>* ts, const CudaMark* ready) {
  cuda::SideStream* stream = nullptr;
  for (torch::Tensor& t : *ts) {
    if (!t.defined() || !t.is_cuda()) continue;
    torch::Tensor h = PinnedFloats(t.sizes());
    if (!ContiguousFloatCuda(t)) {
      h.copy_(t.detach());  // converted and copied by LibTorch, waiting (rare: half, strided)
    } else {
      GP_ENFORCE(first < impl_->keys.size(), "CopyToHost: key ", first, " outside the model");
      if (!stream) stream = &impl_->keys[first]->StreamAfter(ready);
      cuda::CopyAsync(h.data_ptr<float>(), t.data_ptr<float>(), t.numel() * sizeof(float),
                      stream->get());
    }
    t = h;
  }
  if (stream) stream->Synchronize();
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

#else  // no CUDA codecs in this build: marks are empty, CUDA tensors copied by LibTorch

struct CudaMark::Impl {};
CudaMark::CudaMark() = default;
CudaMark::~CudaMark() = default;
void CudaMark::Record() {}
void CudaMark::Reset() {}
void CudaMark::Wait() const {}
bool CudaMark::Passed() const { return true; }
bool CudaMark::recorded() const { return false; }

struct DeviceCodecs::Impl {};
DeviceCodecs::DeviceCodecs() = default;
DeviceCodecs::~DeviceCodecs() = default;
void DeviceCodecs::Reset(size_t) {}
bool DeviceCodecs::EncodeAsync(size_t, const CodecSpec&, double, const compressors::Compressor&,
                               const torch::Tensor&, const compressors::StepContext&,
                               const CudaMark*, const std::function<void()>&) {
  return false;
}
void DeviceCodecs::EncodeFinish(size_t i, Payload*) {
  GP_ENFORCE_AS(Internal, false, "DeviceCodecs: EncodeFinish(", i, ") in a build without CUDA");
}
bool DeviceCodecs::Decode(size_t, const Payload&, torch::Tensor*, DecodeChecks*) { return false; }
void DeviceCodecs::CopyToHost(size_t, std::vector<torch::Tensor>* ts, const CudaMark*) {
  for (torch::Tensor& t : *ts) {
    if (!t.defined() || !t.is_cuda()) continue;
    torch::Tensor h = PinnedFloats(t.sizes());
    h.copy_(t.detach());
    t = h;
  }
}
bool DeviceCodecs::SaveState(size_t, std::string*) const { return false; }
void DeviceCodecs::SetDensity(double) {}

#endif

torch::Tensor PinnedFloats(at::IntArrayRef sizes) {
  return torch::empty(sizes, torch::TensorOptions().dtype(torch::kFloat32).pinned_memory(true));
}

void CopyFromHost(const torch::Tensor& from, torch::Tensor* to) {
  to->copy_(from.view(to->sizes()), /*non_blocking=*/true);
}

}  // namespace gradpress::worker
