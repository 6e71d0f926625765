// KeyCodecs: the per-key codec state of a worker's client (key_codecs.h).
#include "worker/client/key_codecs.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "common/byte_io.h"
#include "common/error.h"
#include "common/shape.h"
#include "common/timer.h"
#include "compressors/momentum_correction.h"
#include "compressors/registry.h"
#include "compressors/tensor_bytes.h"

namespace gradpress::worker {

namespace {

// Pushes to keep past their call: raw tensors, which alias the gradients, copied.
std::vector<KeyPush> KeptCopy(const std::vector<KeyPush>& pushes) {
  std::vector<KeyPush> out = pushes;
  for (KeyPush& p : out)
    if (p.raw.defined()) p.raw = p.raw.clone();
  return out;
}

}  // namespace

using compressors::Compressor;
using compressors::KeyPayload;

bool LostByServer(const Error& e) {
  if (e.code() == ErrorCode::kNotFound) return e.reason() == Reason::kNotRegistered;
  return e.code() == ErrorCode::kFailedPrecondition && e.reason() == Reason::kRegisterAgain;
}

KeyCodecs::KeyCodecs(const ClientOptions& o)
    : push_spec_(o.push),
      min_numel_(o.min_numel),
      skip_1d_(o.skip_1d),
      momentum_correction_(o.momentum_correction) {
  compressors::RegisterBuiltinCompressors();
  compressors::MakeCompressor(push_spec_);  // a bad push codec fails here, not at step 1
}

KeyCodecs::~KeyCodecs() = default;

bool KeyCodecs::Compressed(size_t i) const {
  return compressors::TravelsCompressed(model_[i].shape, min_numel_, skip_1d_);
}

// The push codec (with its error feedback) of one key: small tensors travel uncompressed.
std::unique_ptr<Compressor> KeyCodecs::MakePushCodec(const CodecSpec& push,
                                                     const TensorSpec& s) const {
  if (!compressors::TravelsCompressed(s.shape, min_numel_, skip_1d_))
    return compressors::MakeCompressor({});
  std::unique_ptr<Compressor> c = compressors::MakeCompressor(push);
  if (momentum_correction_ > 0)
    c = std::make_unique<compressors::MomentumCorrection>(std::move(c), momentum_correction_);
  return c;
}

std::vector<int> KeyCodecs::CheckSplit(size_t keys, const std::vector<int>& bucket_keys) {
  size_t total = 0;
  for (int n : bucket_keys) {
    GP_ENFORCE(n >= 1, "Register: a bucket of ", n, " keys");
    total += n;
  }
  GP_ENFORCE(bucket_keys.empty() || total == keys, "Register: buckets hold ", total,
             " keys, the model has ", keys);
  return bucket_keys.size() > 1 ? bucket_keys : std::vector<int>{};
}

void KeyCodecs::SetModel(const std::vector<TensorSpec>& model,
                         const std::vector<int>& bucket_keys) {
  bucket_keys_ = CheckSplit(model.size(), bucket_keys);
  const bool same =
      model.size() == model_.size() && std::equal(model.begin(), model.end(), model_.begin(),
                                                  [](const TensorSpec& a, const TensorSpec& b) {
                                                    return a.key == b.key && a.shape == b.shape;
                                                  });
  if (!same) key_specs_.clear();  // a registration again keeps compress.auto's choice
  model_ = model;
  buckets_.clear();
  size_t begin = 0;
  for (int n : bucket_keys_) {
    buckets_.emplace_back(begin, begin + n);
    begin += n;
  }
  if (buckets_.empty()) buckets_.emplace_back(0, model_.size());
  push_.clear();
  for (size_t i = 0; i < model_.size(); ++i) push_.push_back(MakePushCodec(SpecOf(i), model_[i]));
  device_.Reset(model_.size());
}

KeyCodecs::CallKeys KeyCodecs::Keys(int bucket) const {
  GP_ENFORCE(!buckets_.empty(), "call Register first");
  if (bucket < 0) {
    GP_ENFORCE(buckets_.size() == 1, "the model is split into ", buckets_.size(),
               " buckets: exchange them one bucket at a time");
    return {0, model_.size(), -1};
  }
  GP_ENFORCE(static_cast<size_t>(bucket) < buckets_.size(), "bucket ", bucket, " outside the ",
             buckets_.size(), " registered");
  const auto [begin, end] = buckets_[bucket];
  return {begin, end, buckets_.size() > 1 ? bucket : -1};
}

void KeyCodecs::CheckTensors(const std::vector<torch::Tensor>& ts, const char* what, size_t begin,
                             size_t end) const {
  GP_ENFORCE(!model_.empty(), what, ": call Register first");
  GP_ENFORCE(ts.size() == model_.size(), what, ": ", ts.size(), " tensors for a model of ",
             model_.size(), " keys");
  for (size_t i = begin; i < std::min(end, ts.size()); ++i)
    GP_ENFORCE(ts[i].sizes().vec() == model_[i].shape, what, ": key '", model_[i].key,
               "' has shape ", ShapeToString(ts[i].sizes().vec()), ", registered ",
               ShapeToString(model_[i].shape));
}

std::vector<KeyPush> KeyCodecs::Encode(int64_t step, const std::vector<torch::Tensor>& grads,
                                       size_t begin, size_t end, StepMetrics* m,
                                       const CudaMark* ready) {
  if (resend_) {  // an earlier push sent again: nothing encoded, no codec state moves
    std::vector<KeyPush> again = std::move(*resend_);
    resend_.reset();
    GP_ENFORCE(again.size() == end - begin, "a push of ", again.size(), " keys resent as ",
               end - begin);
    return again;
  }
  CheckTensors(grads, "push", begin, end);
  Timer call;
  std::vector<KeyPush> pushes(end - begin);
  // Large CUDA gradients are encoded on the device: their work is queued first, behind `ready`,
  // so the GPU starts it as soon as backward gets there. Every other gradient is encoded on the
  // host, the CUDA ones after one batch of copies to pinned memory (CopyToHost: one wait for
  // the lot, not one synchronising copy per tensor).
  std::vector<torch::Tensor> host(end - begin);
  std::vector<size_t> queued;  // device encodes awaiting EncodeFinish
  // Where the codecs' time starts: once the GPU has the gradients. Queueing done before it got
  // to `ready` overlapped backward; if it was there already, the whole call counts.
  double mark_ms = -1;
  const auto wait_ready = [&] {
    if (mark_ms >= 0) return;
    const bool overlapped = ready && !ready->Passed();
    if (ready) ready->Wait();
    mark_ms = overlapped ? call.ElapsedMs() : 0;
  };
  std::exception_ptr error;
  try {
    for (size_t i = begin; i < end; ++i) {
      pushes[i - begin].payload.key = model_[i].key;
      const bool device = !push_[i]->IsLossless() &&
                          device_.EncodeAsync(i, Compressed(i) ? SpecOf(i) : CodecSpec{},
                                              Compressed(i) ? momentum_correction_ : 0.0, *push_[i],
                                              grads[i], {model_[i].key, step}, ready, wait_ready);
      if (device) {
        queued.push_back(i);
      } else {
        host[i - begin] = grads[i].detach();
      }
    }
  } catch (...) {
    error = std::current_exception();
  }
  wait_ready();
  for (size_t i : queued) {  // each one finished, also after a failure (its codec's state)
    try {
      device_.EncodeFinish(i, &pushes[i - begin].payload.payload);
    } catch (...) {
      if (!error) error = std::current_exception();
    }
  }
  if (error) std::rethrow_exception(error);
  device_.CopyToHost(begin, &host, ready);
  for (size_t i = begin; i < end; ++i) {
    KeyPush& p = pushes[i - begin];
    const torch::Tensor& g = host[i - begin];     // undefined: encoded on the device
    if (g.defined() && push_[i]->IsLossless()) {  // the payload is the tensor's memory itself
      p.raw = g.to(torch::kFloat32).contiguous();
      p.payload.payload.codec = push_[i]->Name();
      p.payload.payload.shape = model_[i].shape;
      m->bytes_up += p.raw.numel() * sizeof(float);
      continue;
    }
    if (g.defined()) p.payload.payload = push_[i]->Encode(g, {model_[i].key, step});
    m->bytes_up += p.payload.payload.bytes.size();
  }
  m->encode_ms += call.ElapsedMs() - mark_ms;
  if (keep_next_) {
    kept_ = KeptCopy(pushes);
    keep_next_ = false;
  }
  return pushes;
}

void KeyCodecs::KeepNextPushes() {
  keep_next_ = true;
  kept_.clear();
}

std::vector<KeyPush> KeyCodecs::TakeKeptPushes() {
  keep_next_ = false;
  return std::exchange(kept_, {});
}

void KeyCodecs::ResendNext(std::vector<KeyPush> pushes) { resend_ = std::move(pushes); }

const Compressor& KeyCodecs::Decoder(const std::string& codec) {
  std::lock_guard<std::mutex> lock(decoders_mu_);
  auto& d = decoders_[codec];
  if (!d) d = compressors::MakeDecoder(codec);
  return *d;
}

void KeyCodecs::Decode(size_t i, const compressors::Payload& p, torch::Tensor* o, uint64_t* bytes,
                       DecodeChecks* later) {
  GP_ENFORCE(p.shape == model_[i].shape, "server sent key '", model_[i].key, "' with shape ",
             ShapeToString(p.shape));
  *bytes += p.bytes.size();
  if (o->device().is_cpu() && o->scalar_type() == torch::kFloat32 && o->is_contiguous()) {
    Decoder(p.codec).DecodeTo(p.bytes, o->numel(), o->data_ptr<float>());  // in place
  } else if (!device_.Decode(i, p, o, later)) {
    torch::NoGradGuard no_grad;
    if (o->is_cuda()) {  // decoded into pinned memory, copied up without a wait
      torch::Tensor h = PinnedFloats(o->sizes());
      Decoder(p.codec).DecodeTo(p.bytes, o->numel(), h.data_ptr<float>());
      CopyFromHost(h, o);
    } else {
      o->copy_(Decoder(p.codec).Decode(p));
    }
  }
}

double KeyCodecs::DecodeAll(const std::vector<KeyPayload>& got, std::vector<torch::Tensor>* out,
                            uint64_t* bytes, size_t begin, size_t end, DecodeChecks* later) {
  GP_ENFORCE(got.size() == end - begin, "server sent ", got.size(), " tensors for ", end - begin,
             " keys");
  Timer t;
  for (size_t i = begin; i < end; ++i) {
    const KeyPayload& kp = got[i - begin];
    GP_ENFORCE(kp.key == model_[i].key, "server sent key '", kp.key, "' where '", model_[i].key,
               "' was expected");
    Decode(i, kp.payload, &(*out)[i], bytes, later);
  }
  return t.ElapsedMs();
}

std::string KeyCodecs::SaveState() const {
  std::string out;
  ByteWriter w(&out);
  w.PutVarint(push_.size());
  for (size_t i = 0; i < push_.size(); ++i) {
    const std::string& key = model_[i].key;
    std::string state;
    if (!device_.SaveState(i, &state)) push_[i]->SaveState(&state);
    w.PutVarint(key.size());
    w.PutBytes(key.data(), key.size());
    w.PutVarint(state.size());
    w.PutBytes(state.data(), state.size());
  }
  return out;
}

void KeyCodecs::LoadState(std::string_view state) {
  ByteReader r(state, "push codec state");
  const uint64_t n = r.GetVarint("key count");
  GP_ENFORCE(n == push_.size(), "push codec state holds ", n, " keys, the model ", push_.size(),
             " (Register first, with the same model)");
  // Restore into fresh codecs first, so a bad state leaves the current ones untouched.
  std::vector<std::unique_ptr<Compressor>> fresh;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t len = r.GetVarint("key length");
    GP_ENFORCE(len <= r.remaining(), "push codec state: key of ", len, " bytes");
    const std::string key(r.GetBytes(len, "key"));
    GP_ENFORCE(key == model_[i].key, "push codec state: key ", i, " is '", key, "', the model's '",
               model_[i].key, "'");
    const uint64_t size = r.GetVarint("state length");
    GP_ENFORCE(size <= r.remaining(), "push codec state of '", key, "': ", size, " bytes");
    fresh.push_back(MakePushCodec(SpecOf(i), model_[i]));
    fresh.back()->LoadState(r.GetBytes(size, "state"));
  }
  r.ExpectEnd();
  push_ = std::move(fresh);
  device_.Reset(model_.size());  // device codecs start again from the loaded state
}

void KeyCodecs::SetPushCodec(const CodecSpec& push) {
  GP_ENFORCE(!model_.empty(), "SetPushCodec before Register");
  std::vector<std::unique_ptr<Compressor>> fresh;
  for (const auto& s : model_) fresh.push_back(MakePushCodec(push, s));  // validates all
  push_spec_ = push;
  key_specs_.clear();
  push_ = std::move(fresh);
  device_.Reset(model_.size());
}

void KeyCodecs::SetKeyPushCodecs(const std::vector<CodecSpec>& per_key) {
  GP_ENFORCE(!model_.empty(), "SetKeyPushCodecs before Register");
  GP_ENFORCE(per_key.size() == model_.size(), "SetKeyPushCodecs: ", per_key.size(),
             " codecs for a model of ", model_.size(), " keys");
  std::vector<std::unique_ptr<Compressor>> fresh;
  for (size_t i = 0; i < model_.size(); ++i) fresh.push_back(MakePushCodec(per_key[i], model_[i]));
  key_specs_ = per_key;
  push_ = std::move(fresh);
  device_.Reset(model_.size());
}

bool KeyCodecs::SetPushDensity(double ratio) {
  bool any = false;
  for (size_t i = 0; i < push_.size(); ++i)
    if (Compressed(i)) any = push_[i]->SetDensity(ratio) || any;
  if (any) device_.SetDensity(ratio);
  return any;
}

std::vector<KeyPayload> WeightPayloads(const std::vector<TensorSpec>& model,
                                       const std::vector<torch::Tensor>& params) {
  std::vector<KeyPayload> out;
  for (size_t i = 0; i < params.size(); ++i) {
    compressors::Payload p;
    p.codec = "none";
    p.shape = params[i].sizes().vec();
    p.bytes = TensorToBytes(params[i].to(torch::kFloat32));
    out.push_back({model[i].key, std::move(p)});
  }
  return out;
}

KeyPayload ToPayload(const KeyPush& p) {
  KeyPayload out = p.payload;
  if (p.raw.defined()) out.payload.bytes = TensorToBytes(p.raw);
  return out;
}

}  // namespace gradpress::worker
