// ServerClient: the carrier-independent half of the worker's client (server_client.h): the
// registered model and buckets, the push codecs and their state, the pull decoders.
#include "worker/server_client.h"

#include "common/byte_io.h"
#include "common/error.h"
#include "common/timer.h"
#include "compressors/momentum_correction.h"
#include "compressors/registry.h"
#include "compressors/tensor_bytes.h"

namespace gradpress::worker {

using compressors::Compressor;
using compressors::KeyPayload;

bool LostByServer(const Error& e) {
  if (e.code() == ErrorCode::kNotFound) return e.reason() == Reason::kNotRegistered;
  return e.code() == ErrorCode::kFailedPrecondition && e.reason() == Reason::kRegisterAgain;
}

void ServerClient::Report(const proto::WorkerRow& row) {
  std::lock_guard<std::mutex> lock(reports_mu_);
  if (reports_.size() == kMaxReports) reports_.pop_front();
  reports_.push_back(row);
}

std::vector<proto::WorkerRow> ServerClient::TakeReports() {
  std::lock_guard<std::mutex> lock(reports_mu_);
  std::vector<proto::WorkerRow> out(reports_.begin(), reports_.end());
  reports_.clear();
  return out;
}

ServerClient::ServerClient(ClientOptions options) : opt_(std::move(options)) {
  compressors::RegisterBuiltinCompressors();
  compressors::MakeCompressor(opt_.push);  // a bad push codec fails here, not at step 1
}

ServerClient::~ServerClient() = default;

// The push codec (with its error feedback) of one key: small tensors travel uncompressed.
std::unique_ptr<Compressor> ServerClient::MakePushCodec(const ClientOptions& o,
                                                        const TensorSpec& s) const {
  if (!compressors::TravelsCompressed(s.shape, o.min_numel, o.skip_1d))
    return compressors::MakeCompressor({});
  std::unique_ptr<Compressor> c = compressors::MakeCompressor(o.push);
  if (o.momentum_correction > 0)
    c = std::make_unique<compressors::MomentumCorrection>(std::move(c), o.momentum_correction);
  return c;
}

std::vector<std::pair<size_t, size_t>> ServerClient::SplitBuckets(
    const std::vector<TensorSpec>& model, const std::vector<int>& bucket_keys) {
  std::vector<std::pair<size_t, size_t>> buckets;
  size_t begin = 0;
  for (int n : bucket_keys) {
    GP_ENFORCE(n >= 1, "Register: a bucket of ", n, " keys");
    buckets.emplace_back(begin, begin + n);
    begin += n;
  }
  GP_ENFORCE(bucket_keys.empty() || begin == model.size(), "Register: buckets hold ", begin,
             " keys, the model has ", model.size());
  if (buckets.empty()) buckets.emplace_back(0, model.size());
  return buckets;
}

void ServerClient::SetModel(const std::vector<TensorSpec>& model,
                            std::vector<std::pair<size_t, size_t>> buckets) {
  model_ = model;
  buckets_ = std::move(buckets);
  push_.clear();
  for (const auto& s : model_) push_.push_back(MakePushCodec(opt_, s));
  device_.Reset(model_.size());
}

int ServerClient::buckets() const { return std::max<int>(1, buckets_.size()); }

std::pair<size_t, size_t> ServerClient::BucketKeys(int bucket) const {
  GP_ENFORCE(bucket >= 0 && static_cast<size_t>(bucket) < buckets_.size(), "bucket ", bucket,
             " outside the ", buckets_.size(), " registered");
  return buckets_[bucket];
}

std::pair<size_t, size_t> ServerClient::Keys(int bucket) const {
  return bucket >= 0 ? BucketKeys(bucket) : std::pair<size_t, size_t>{0, model_.size()};
}

void ServerClient::CheckTensors(const std::vector<torch::Tensor>& ts, const char* what,
                                size_t begin, size_t end) const {
  GP_ENFORCE(!model_.empty(), what, ": call Register first");
  GP_ENFORCE(ts.size() == model_.size(), what, ": ", ts.size(), " tensors for a model of ",
             model_.size(), " keys");
  for (size_t i = begin; i < std::min(end, ts.size()); ++i)
    GP_ENFORCE(ts[i].sizes().vec() == model_[i].shape, what, ": key '", model_[i].key,
               "' has shape ", ShapeToString(ts[i].sizes().vec()), ", registered ",
               ShapeToString(model_[i].shape));
}

const Compressor& ServerClient::Decoder(const std::string& codec) {
  std::lock_guard<std::mutex> lock(decoders_mu_);
  auto& d = decoders_[codec];
  if (!d) d = compressors::MakeDecoder(codec);
  return *d;
}

double ServerClient::DecodeInto(const std::vector<KeyPayload>& got, std::vector<torch::Tensor>* out,
                                uint64_t* bytes, size_t begin, size_t end) {
  end = std::min(end, model_.size());
  GP_ENFORCE(got.size() == end - begin, "server sent ", got.size(), " tensors for ", end - begin,
             " keys");
  Timer t;
  for (size_t i = begin; i < end; ++i) {
    const KeyPayload& kp = got[i - begin];
    GP_ENFORCE(kp.key == model_[i].key, "server sent key '", kp.key, "' where '", model_[i].key,
               "' was expected");
    *bytes += kp.payload.bytes.size();
    const compressors::Payload& p = kp.payload;
    torch::Tensor& o = (*out)[i];
    GP_ENFORCE(p.shape == model_[i].shape, "server sent key '", kp.key, "' with shape ",
               ShapeToString(p.shape));
    DecodeTensor(p, &o);
  }
  return t.ElapsedMs();
}

compressors::Payload ServerClient::EncodePush(size_t i, const torch::Tensor& g,
                                              const compressors::StepContext& ctx) {
  const bool compressed =
      compressors::TravelsCompressed(model_[i].shape, opt_.min_numel, opt_.skip_1d);
  compressors::Payload p;
  // DGC's momentum correction has no device kernel: its keys stay on the host.
  if (!(compressed && opt_.momentum_correction > 0) &&
      device_.Encode(i, compressed ? opt_.push : CodecSpec{}, *push_[i], g, ctx, &p))
    return p;
  return push_[i]->Encode(g, ctx);
}

void ServerClient::DecodeTensor(const compressors::Payload& p, torch::Tensor* o) {
  if (o->device().is_cpu() && o->scalar_type() == torch::kFloat32 && o->is_contiguous()) {
    Decoder(p.codec).DecodeTo(p.bytes, o->numel(), o->data_ptr<float>());  // in place
  } else if (!device_.Decode(p, o)) {
    torch::NoGradGuard no_grad;
    o->copy_(Decoder(p.codec).Decode(p));
  }
}

std::string ServerClient::SaveState() const {
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

void ServerClient::LoadState(std::string_view state) {
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
    fresh.push_back(MakePushCodec(opt_, model_[i]));
    fresh.back()->LoadState(r.GetBytes(size, "state"));
  }
  r.ExpectEnd();
  push_ = std::move(fresh);
  device_.Reset(model_.size());  // device codecs start again from the loaded state
}

void ServerClient::SetPushCodec(const CodecSpec& push) {
  GP_ENFORCE(!model_.empty(), "SetPushCodec before Register");
  ClientOptions o = opt_;
  o.push = push;
  std::vector<std::unique_ptr<Compressor>> fresh;
  for (const auto& s : model_) fresh.push_back(MakePushCodec(o, s));  // validates all
  opt_.push = push;
  push_ = std::move(fresh);
  device_.Reset(model_.size());
}

bool ServerClient::SetPushDensity(double ratio) {
  bool any = false;
  for (size_t i = 0; i < push_.size(); ++i)
    if (compressors::TravelsCompressed(model_[i].shape, opt_.min_numel, opt_.skip_1d))
      any = push_[i]->SetDensity(ratio) || any;
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

}  // namespace gradpress::worker
