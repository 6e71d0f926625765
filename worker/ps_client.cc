#include "worker/ps_client.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "common/byte_io.h"
#include "common/error.h"
#include "common/tensor_bytes.h"
#include "common/timer.h"
#include "compressors/momentum_correction.h"
#include "compressors/registry.h"
#include "proto/gradpress.grpc.pb.h"
#include "transport/chunks.h"
#include "transport/status.h"

namespace gradpress::worker {

using compressors::Compressor;
using compressors::KeyPayload;

struct PsClient::Impl {
  ~Impl() { StopHeartbeats(); }
  void StopHeartbeats() {
    {
      std::lock_guard<std::mutex> lock(hb_mu);
      hb_stop = true;
    }
    hb_cv.notify_all();
    if (hb_thread.joinable()) hb_thread.join();
  }
  std::mutex hb_mu;
  std::condition_variable hb_cv;
  bool hb_stop = false;
  std::thread hb_thread;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<proto::ParameterServer::Stub> stub;
  std::vector<TensorSpec> model;
  std::vector<std::unique_ptr<Compressor>> push;  // per key, with its own error feedback
  std::map<std::string, std::unique_ptr<Compressor>> decoders;

  const Compressor& Decoder(const std::string& codec) {
    auto& d = decoders[codec];
    if (!d) d = compressors::MakeDecoder(codec);
    return *d;
  }
};

namespace {

// The push codec (with its error feedback) of one key: small tensors travel uncompressed.
std::unique_ptr<Compressor> MakePushCodec(const ClientOptions& o, const TensorSpec& s) {
  if (!compressors::TravelsCompressed(s.shape, o.min_numel, o.skip_1d))
    return compressors::MakeCompressor({});
  std::unique_ptr<Compressor> c = compressors::MakeCompressor(o.push);
  if (o.momentum_correction > 0)
    c = std::make_unique<compressors::MomentumCorrection>(std::move(c), o.momentum_correction);
  return c;
}

// Reads a PullHeader and the chunks of a reply stream.
template <typename Reader>
std::vector<KeyPayload> ReadResult(Reader* reader, const std::vector<TensorSpec>& model,
                                   proto::PullHeader* header) {
  proto::PullMessage msg;
  if (!reader->Read(&msg)) return {};  // the status says why
  GP_ENFORCE(msg.has_header(), "reply stream must start with a PullHeader");
  *header = msg.header();
  transport::PayloadAssembler assembler(model);
  while (reader->Read(&msg)) {
    GP_ENFORCE(msg.has_chunk(), "reply stream has a second header");
    assembler.Add(msg.mutable_chunk());
  }
  return assembler.Finish();
}

}  // namespace

PsClient::PsClient(ClientOptions options) : opt_(std::move(options)), impl_(new Impl) {
  compressors::RegisterBuiltinCompressors();
  compressors::MakeCompressor(opt_.push);  // a bad push codec fails here, not at step 1
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  impl_->channel = grpc::CreateCustomChannel(opt_.server, grpc::InsecureChannelCredentials(), args);
  impl_->stub = proto::ParameterServer::NewStub(impl_->channel);
}

PsClient::~PsClient() = default;

namespace {

// Runs `call` (one RPC attempt, fresh context each time) with retries on Unavailable.
template <typename Fn>
auto WithRetry(const ClientOptions& opt, const char* what, Fn&& call) -> decltype(call(nullptr)) {
  double backoff = opt.backoff_initial_s;
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::duration_cast<std::chrono::system_clock::duration>(
                         std::chrono::duration<double>(opt.deadline_s)));
    try {
      return call(&ctx);
    } catch (const Unavailable& e) {
      if (attempt >= opt.max_retries) throw;
      spdlog::warn("{} {}: {}; retry {} in {:.2f} s", opt.worker_id, what, e.what(), attempt + 1,
                   backoff);
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(backoff * 2, opt.backoff_max_s);
    }
  }
}

void FillHeader(const ClientOptions& opt, int64_t step, int64_t base_step, std::optional<double> lr,
                proto::PushMessage* msg) {
  auto* h = msg->mutable_header();
  h->set_worker_id(opt.worker_id);
  h->set_incarnation(opt.incarnation);
  h->set_step(step);
  h->set_base_step(base_step);
  if (lr) h->set_lr(*lr);
}

template <typename Writer>
void WritePayloads(Writer* writer, const std::vector<KeyPayload>& payloads) {
  for (const auto& kp : payloads) {
    bool ok = true;
    transport::ForEachChunk(kp, [&](proto::TensorChunk&& c) {
      proto::PushMessage m;
      *m.mutable_chunk() = std::move(c);
      ok = ok && writer->Write(m);
    });
    if (!ok) return;  // the server ended the call; Finish() says why
  }
}

}  // namespace

RegisterInfo PsClient::Register(const std::vector<TensorSpec>& model) {
  proto::RegisterRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_config_hash(opt_.config_hash);
  for (const auto& s : model) transport::ToProto(s, req.add_model());
  proto::RegisterReply reply = WithRetry(opt_, "Register", [&](grpc::ClientContext* ctx) {
    proto::RegisterReply r;
    transport::ThrowIfError(impl_->stub->Register(ctx, req, &r), "Register");
    return r;
  });
  impl_->model = model;
  impl_->push.clear();
  for (const auto& s : model) impl_->push.push_back(MakePushCodec(opt_, s));
  if (opt_.heartbeat_s > 0 && !impl_->hb_thread.joinable()) {
    impl_->hb_thread = std::thread([this] {
      std::unique_lock<std::mutex> lock(impl_->hb_mu);
      const auto period = std::chrono::duration<double>(opt_.heartbeat_s);
      while (!impl_->hb_cv.wait_for(lock, period, [this] { return impl_->hb_stop; })) {
        lock.unlock();
        proto::HeartbeatRequest req;
        req.set_worker_id(opt_.worker_id);
        req.set_incarnation(opt_.incarnation);
        proto::HeartbeatReply r;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(period));
        const grpc::Status s = impl_->stub->Heartbeat(&ctx, req, &r);
        if (!s.ok()) spdlog::warn("{} heartbeat: {}", opt_.worker_id, s.error_message());
        lock.lock();
      }
    });
  }
  return {reply.rank(), reply.world_size(), reply.server_step(), reply.initialized()};
}

namespace {
void CheckTensors(const std::vector<TensorSpec>& model, const std::vector<torch::Tensor>& ts,
                  const char* what) {
  GP_ENFORCE(!model.empty(), what, ": call Register first");
  GP_ENFORCE(ts.size() == model.size(), what, ": ", ts.size(), " tensors for a model of ",
             model.size(), " keys");
  for (size_t i = 0; i < ts.size(); ++i)
    GP_ENFORCE(ts[i].sizes().vec() == model[i].shape, what, ": key '", model[i].key, "' has shape ",
               ShapeToString(ts[i].sizes().vec()), ", registered ", ShapeToString(model[i].shape));
}
}  // namespace

// Writes received payloads into `out` (copy_ handles device and dtype); returns decode ms.
double DecodeInto(PsClient::Impl& impl, const std::vector<KeyPayload>& got,
                  std::vector<torch::Tensor>* out, uint64_t* bytes) {
  GP_ENFORCE(got.size() == impl.model.size(), "server sent ", got.size(),
             " tensors for a model of ", impl.model.size(), " keys");
  Timer t;
  for (size_t i = 0; i < got.size(); ++i) {
    GP_ENFORCE(got[i].key == impl.model[i].key, "server sent key '", got[i].key, "' where '",
               impl.model[i].key, "' was expected");
    *bytes += got[i].payload.bytes.size();
    const compressors::Payload& p = got[i].payload;
    torch::Tensor& o = (*out)[i];
    GP_ENFORCE(p.shape == impl.model[i].shape, "server sent key '", got[i].key, "' with shape ",
               ShapeToString(p.shape));
    if (o.device().is_cpu() && o.scalar_type() == torch::kFloat32 && o.is_contiguous()) {
      impl.Decoder(p.codec).DecodeTo(p.bytes, o.numel(), o.data_ptr<float>());  // in place
    } else {
      torch::NoGradGuard no_grad;
      o.copy_(impl.Decoder(p.codec).Decode(p));
    }
  }
  return t.ElapsedMs();
}

namespace {
// Lossless ("none") payloads of the caller's tensors, for initial or published weights.
std::vector<KeyPayload> WeightPayloads(const PsClient::Impl& impl,
                                       const std::vector<torch::Tensor>& params) {
  std::vector<KeyPayload> out;
  for (size_t i = 0; i < params.size(); ++i) {
    compressors::Payload p;
    p.codec = "none";
    p.shape = params[i].sizes().vec();
    p.bytes = TensorToBytes(params[i].to(torch::kFloat32));
    out.push_back({impl.model[i].key, std::move(p)});
  }
  return out;
}
}  // namespace

// Streams lossless weights through InitWeights or PublishWeights; returns `accepted`.
bool PsClient::UploadWeights(bool publish, int64_t round,
                             const std::vector<torch::Tensor>& params) {
  CheckTensors(impl_->model, params, publish ? "PublishWeights" : "InitWeights");
  const std::vector<KeyPayload> payloads = WeightPayloads(*impl_, params);
  return WithRetry(opt_, publish ? "PublishWeights" : "InitWeights", [&](grpc::ClientContext* ctx) {
    proto::InitReply reply;
    auto writer =
        publish ? impl_->stub->PublishWeights(ctx, &reply) : impl_->stub->InitWeights(ctx, &reply);
    proto::PushMessage header;
    FillHeader(opt_, round, 0, std::nullopt, &header);
    if (writer->Write(header)) WritePayloads(writer.get(), payloads);
    writer->WritesDone();
    transport::ThrowIfError(writer->Finish(), publish ? "PublishWeights" : "InitWeights");
    return reply.accepted();
  });
}

bool PsClient::InitOrPull(std::vector<torch::Tensor>* params) {
  const bool accepted = UploadWeights(/*publish=*/false, 0, *params);
  PullWeights(params, 0);
  return accepted;
}

void PsClient::PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) {
  UploadWeights(/*publish=*/true, round, params);
}

void PsClient::PullWeights(std::vector<torch::Tensor>* params, int64_t min_version) {
  CheckTensors(impl_->model, *params, "PullWeights");
  proto::PullRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_step(min_version);
  std::vector<KeyPayload> got = WithRetry(opt_, "PullWeights", [&](grpc::ClientContext* ctx) {
    auto reader = impl_->stub->PullWeights(ctx, req);
    proto::PullHeader header;
    auto payloads = ReadResult(reader.get(), impl_->model, &header);
    transport::ThrowIfError(reader->Finish(), "PullWeights");
    return payloads;
  });
  uint64_t bytes = 0;
  DecodeInto(*impl_, got, params, &bytes);
}

std::pair<int, double> PsClient::Elect(int64_t round, double score) {
  proto::ElectRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_round(round);
  req.set_score(score);
  const proto::ElectReply r = WithRetry(opt_, "Elect", [&](grpc::ClientContext* ctx) {
    proto::ElectReply reply;
    transport::ThrowIfError(impl_->stub->Elect(ctx, req, &reply), "Elect");
    return reply;
  });
  return {r.best_rank(), r.best_score()};
}

namespace {
std::vector<KeyPayload> EncodeAll(PsClient::Impl& impl, int64_t step,
                                  const std::vector<torch::Tensor>& grads, StepStats* st) {
  CheckTensors(impl.model, grads, "push");
  Timer t;
  std::vector<KeyPayload> payloads(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    payloads[i].key = impl.model[i].key;
    payloads[i].payload = impl.push[i]->Encode(grads[i], {impl.model[i].key, step});
    st->bytes_up += payloads[i].payload.bytes.size();
  }
  st->encode_ms = t.ElapsedMs();
  return payloads;
}

void FillFromHeader(const proto::PullHeader& h, double rpc_ms, StepStats* st) {
  st->wait_ms = h.wait_ms();
  st->server_ms = h.server_ms();
  st->server_step = h.step();
  st->contributors = h.contributors();
  st->network_ms = std::max(0.0, rpc_ms - st->wait_ms - st->server_ms);
}
}  // namespace

StepStats PsClient::PushPull(int64_t step, const std::vector<torch::Tensor>& grads,
                             std::vector<torch::Tensor>* out, int64_t base_step) {
  StepStats st;
  const std::vector<KeyPayload> payloads = EncodeAll(*impl_, step, grads, &st);
  CheckTensors(impl_->model, *out, "PushPull output");
  proto::PullHeader header;
  Timer rpc;
  std::vector<KeyPayload> got = WithRetry(opt_, "PushPull", [&](grpc::ClientContext* ctx) {
    auto stream = impl_->stub->PushPull(ctx);
    proto::PushMessage msg;
    FillHeader(opt_, step, base_step, server_lr_, &msg);
    if (stream->Write(msg)) WritePayloads(stream.get(), payloads);
    stream->WritesDone();
    auto result = ReadResult(stream.get(), impl_->model, &header);
    transport::ThrowIfError(stream->Finish(), "PushPull");
    GP_ENFORCE(header.step() >= 0 && !result.empty(), "PushPull: server sent no result");
    return result;
  });
  FillFromHeader(header, rpc.ElapsedMs(), &st);
  st.decode_ms = DecodeInto(*impl_, got, out, &st.bytes_down);
  return st;
}

StepStats PsClient::Push(int64_t step, const std::vector<torch::Tensor>& grads, int64_t base_step) {
  StepStats st;
  const std::vector<KeyPayload> payloads = EncodeAll(*impl_, step, grads, &st);
  Timer rpc;
  proto::PushReply reply = WithRetry(opt_, "Push", [&](grpc::ClientContext* ctx) {
    proto::PushReply r;
    auto writer = impl_->stub->Push(ctx, &r);
    proto::PushMessage msg;
    FillHeader(opt_, step, base_step, server_lr_, &msg);
    if (writer->Write(msg)) WritePayloads(writer.get(), payloads);
    writer->WritesDone();
    transport::ThrowIfError(writer->Finish(), "Push");
    return r;
  });
  st.network_ms = rpc.ElapsedMs();
  st.server_step = reply.step();
  st.duplicate = reply.duplicate();
  return st;
}

StepStats PsClient::Pull(std::vector<torch::Tensor>* out, int64_t step) {
  CheckTensors(impl_->model, *out, "Pull");
  StepStats st;
  proto::PullRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_step(step);
  proto::PullHeader header;
  Timer rpc;
  std::vector<KeyPayload> got = WithRetry(opt_, "Pull", [&](grpc::ClientContext* ctx) {
    auto reader = impl_->stub->Pull(ctx, req);
    auto payloads = ReadResult(reader.get(), impl_->model, &header);
    transport::ThrowIfError(reader->Finish(), "Pull");
    return payloads;
  });
  FillFromHeader(header, rpc.ElapsedMs(), &st);
  st.decode_ms = DecodeInto(*impl_, got, out, &st.bytes_down);
  return st;
}

int64_t PsClient::Heartbeat() {
  proto::HeartbeatRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  return WithRetry(opt_, "Heartbeat", [&](grpc::ClientContext* ctx) {
    proto::HeartbeatReply r;
    transport::ThrowIfError(impl_->stub->Heartbeat(ctx, req, &r), "Heartbeat");
    return r.server_step();
  });
}

std::string PsClient::StatsText() {
  return WithRetry(opt_, "Stats", [&](grpc::ClientContext* ctx) {
    proto::StatsReply r;
    transport::ThrowIfError(impl_->stub->Stats(ctx, proto::StatsRequest{}, &r), "Stats");
    return r.prometheus();
  });
}

std::string PsClient::SaveState() const {
  std::string out;
  ByteWriter w(&out);
  w.PutVarint(impl_->push.size());
  for (size_t i = 0; i < impl_->push.size(); ++i) {
    const std::string& key = impl_->model[i].key;
    std::string state;
    impl_->push[i]->SaveState(&state);
    w.PutVarint(key.size());
    w.PutBytes(key.data(), key.size());
    w.PutVarint(state.size());
    w.PutBytes(state.data(), state.size());
  }
  return out;
}

void PsClient::LoadState(std::string_view state) {
  ByteReader r(state, "push codec state");
  const uint64_t n = r.GetVarint("key count");
  GP_ENFORCE(n == impl_->push.size(), "push codec state holds ", n, " keys, the model ",
             impl_->push.size(), " (Register first, with the same model)");
  // Restore into fresh codecs first, so a bad state leaves the current ones untouched.
  std::vector<std::unique_ptr<Compressor>> fresh;
  for (size_t i = 0; i < n; ++i) {
    const uint64_t len = r.GetVarint("key length");
    GP_ENFORCE(len <= r.remaining(), "push codec state: key of ", len, " bytes");
    const std::string key(r.GetBytes(len, "key"));
    GP_ENFORCE(key == impl_->model[i].key, "push codec state: key ", i, " is '", key,
               "', the model's '", impl_->model[i].key, "'");
    const uint64_t size = r.GetVarint("state length");
    GP_ENFORCE(size <= r.remaining(), "push codec state of '", key, "': ", size, " bytes");
    fresh.push_back(MakePushCodec(opt_, impl_->model[i]));
    fresh.back()->LoadState(r.GetBytes(size, "state"));
  }
  r.ExpectEnd();
  impl_->push = std::move(fresh);
}

void PsClient::SetPushCodec(const compressors::CompressorConfig& push) {
  GP_ENFORCE(!impl_->model.empty(), "SetPushCodec before Register");
  ClientOptions o = opt_;
  o.push = push;
  std::vector<std::unique_ptr<Compressor>> fresh;
  for (const auto& s : impl_->model) fresh.push_back(MakePushCodec(o, s));  // validates all
  opt_.push = push;
  impl_->push = std::move(fresh);
}

bool PsClient::SetPushDensity(double ratio) {
  bool any = false;
  for (size_t i = 0; i < impl_->push.size(); ++i)
    if (compressors::TravelsCompressed(impl_->model[i].shape, opt_.min_numel, opt_.skip_1d))
      any = impl_->push[i]->SetDensity(ratio) || any;
  return any;
}

}  // namespace gradpress::worker
