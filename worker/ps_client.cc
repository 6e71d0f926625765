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
#include "compressors/none.h"
#include "compressors/registry.h"
#include "proto/gradpress.grpc.pb.h"
#include "transport/chunks.h"
#include "transport/status.h"
#include "transport/wire.h"

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

// The tensor methods on raw byte buffers (transport/wire.h): the same bytes as the generated
// stub's messages, with tensor bytes framed straight from (and into) tensor memory.
constexpr char kPushPullMethod[] = "/gradpress.proto.ParameterServer/PushPull";
constexpr char kPushMethod[] = "/gradpress.proto.ParameterServer/Push";
constexpr char kPullMethod[] = "/gradpress.proto.ParameterServer/Pull";

// One key's push: a codec payload, or (an undecorated "none" codec) the tensor itself, whose
// memory the gRPC slices then refer to: no copy before the kernel's.
struct KeyPush {
  KeyPayload payload;  // codec, shape, dtype; bytes unless `raw` is defined
  torch::Tensor raw;   // CPU float32 contiguous
};

std::vector<KeyPush> EncodeAll(PsClient::Impl& impl, int64_t step,
                               const std::vector<torch::Tensor>& grads, StepStats* st) {
  CheckTensors(impl.model, grads, "push");
  Timer t;
  std::vector<KeyPush> pushes(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) {
    KeyPush& p = pushes[i];
    p.payload.key = impl.model[i].key;
    if (dynamic_cast<const compressors::NoneCompressor*>(impl.push[i].get()) != nullptr) {
      p.raw = grads[i].detach().to(torch::kCPU, torch::kFloat32).contiguous();
      p.payload.payload.codec = "none";
      p.payload.payload.shape = impl.model[i].shape;
      st->bytes_up += p.raw.numel() * sizeof(float);
      continue;
    }
    p.payload.payload = impl.push[i]->Encode(grads[i], {impl.model[i].key, step});
    st->bytes_up += p.payload.payload.bytes.size();
  }
  st->encode_ms = t.ElapsedMs();
  return pushes;
}

// Writes every key's chunks; stops early (false) once the server has ended the call.
template <typename Writer>
bool WriteRawPush(Writer* writer, const std::vector<KeyPush>& pushes) {
  for (const KeyPush& p : pushes) {
    const compressors::Payload& payload = p.payload.payload;
    const char* data =
        p.raw.defined() ? static_cast<const char*>(p.raw.data_ptr()) : payload.bytes.data();
    const size_t total = p.raw.defined() ? p.raw.numel() * sizeof(float) : payload.bytes.size();
    std::shared_ptr<const void> keep;  // the tensor's storage, while gRPC holds its bytes
    if (p.raw.defined()) keep = std::make_shared<torch::Tensor>(p.raw);
    proto::TensorChunk meta;
    meta.set_key(p.payload.key);
    meta.set_codec(payload.codec);
    for (int64_t d : payload.shape) meta.add_shape(d);
    meta.set_dtype(static_cast<uint32_t>(payload.dtype));
    if (!transport::ForEachFrame(meta, data, total, keep,
                                 [&](grpc::ByteBuffer b) { return writer->Write(b); })) {
      return false;  // the server ended the call; Finish() says why
    }
  }
  return true;
}

grpc::ByteBuffer HeaderMessage(const ClientOptions& opt, int64_t step, int64_t base_step,
                               std::optional<double> lr) {
  proto::PushMessage msg;
  FillHeader(opt, step, base_step, lr, &msg);
  return transport::FrameHeader(msg.header());
}

// Reads a reply stream: a PullHeader, then chunks. "none" payloads for CPU float32
// contiguous tensors are copied from the received slices straight into `out`; the others
// are reassembled and decoded once the stream has ended (DecodeRest). Returns false if the
// stream ended before its header (the status says why).
struct ResultReader {
  PsClient::Impl& impl;
  std::vector<torch::Tensor>* out;
  proto::PullHeader header;
  std::vector<uint64_t> direct;  // per key: bytes copied into out (-1: not direct)
  transport::PayloadAssembler assembler;
  uint64_t bytes = 0;

  ResultReader(PsClient::Impl& i, std::vector<torch::Tensor>* o)
      : impl(i), out(o), direct(i.model.size(), kNotDirect), assembler(i.model) {}
  static constexpr uint64_t kNotDirect = ~uint64_t{0};

  template <typename Reader>
  bool Read(Reader* reader) {
    grpc::ByteBuffer buffer;
    transport::WireMessage m;
    if (!reader->Read(&buffer)) return false;
    transport::ParseMessage(&buffer, &m);
    GP_ENFORCE(m.has_header && header.ParseFromString(m.header),
               "reply stream must start with a PullHeader");
    while (reader->Read(&buffer)) {
      transport::ParseMessage(&buffer, &m);
      GP_ENFORCE(m.has_chunk, "reply stream has a second header");
      Chunk(&m);
    }
    return true;
  }

  void Chunk(transport::WireMessage* m) {
    proto::TensorChunk& c = m->chunk;
    size_t i = 0;
    while (i < impl.model.size() && impl.model[i].key != c.key()) ++i;
    GP_ENFORCE(i < impl.model.size(), "server sent unknown key '", c.key(), "'");
    torch::Tensor& o = (*out)[i];
    const uint64_t size = static_cast<uint64_t>(o.numel()) * sizeof(float);
    const bool can =
        c.codec() == "none" && o.device().is_cpu() && o.scalar_type() == torch::kFloat32 &&
        o.is_contiguous() && c.total_bytes() == size &&
        std::vector<int64_t>(c.shape().begin(), c.shape().end()) == impl.model[i].shape;
    if (c.offset() == 0 && can) direct[i] = 0;
    if (direct[i] == kNotDirect) {  // reassembled, decoded at the end
      std::string data;
      data.reserve(m->data_size);
      for (std::string_view v : m->data) data.append(v);
      c.set_data(std::move(data));
      assembler.Add(&c);
      return;
    }
    GP_ENFORCE(can && c.offset() == direct[i] && m->data_size <= size - direct[i],
               "server sent key '", c.key(), "' out of order (offset ", c.offset(), ")");
    char* dst = static_cast<char*>(o.data_ptr()) + direct[i];
    for (std::string_view v : m->data) {
      std::memcpy(dst, v.data(), v.size());
      dst += v.size();
    }
    direct[i] += m->data_size;
    bytes += m->data_size;
  }

  // Checks every key arrived whole and decodes the reassembled ones into out; decode ms.
  double DecodeRest() {
    Timer t;
    std::vector<KeyPayload> rest = assembler.Finish();
    size_t r = 0;
    for (size_t i = 0; i < impl.model.size(); ++i) {
      if (direct[i] != kNotDirect) {
        GP_ENFORCE(direct[i] == static_cast<uint64_t>((*out)[i].numel()) * sizeof(float),
                   "server sent ", direct[i], " bytes of key '", impl.model[i].key, "'");
        continue;
      }
      GP_ENFORCE(r < rest.size() && rest[r].key == impl.model[i].key, "server sent no key '",
                 impl.model[i].key, "'");
      const compressors::Payload& p = rest[r++].payload;
      bytes += p.bytes.size();
      GP_ENFORCE(p.shape == impl.model[i].shape, "server sent key '", impl.model[i].key,
                 "' with shape ", ShapeToString(p.shape));
      torch::Tensor& o = (*out)[i];
      if (o.device().is_cpu() && o.scalar_type() == torch::kFloat32 && o.is_contiguous()) {
        impl.Decoder(p.codec).DecodeTo(p.bytes, o.numel(), o.data_ptr<float>());  // in place
      } else {
        torch::NoGradGuard no_grad;
        o.copy_(impl.Decoder(p.codec).Decode(p));
      }
    }
    GP_ENFORCE(r == rest.size(), "server sent ", rest.size() - r, " extra keys");
    return t.ElapsedMs();
  }
};

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
  const std::vector<KeyPush> pushes = EncodeAll(*impl_, step, grads, &st);
  CheckTensors(impl_->model, *out, "PushPull output");
  const grpc::internal::RpcMethod method(kPushPullMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
                                         impl_->channel);
  Timer rpc;
  std::unique_ptr<ResultReader> got;
  WithRetry(opt_, "PushPull", [&](grpc::ClientContext* ctx) {
    std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
            impl_->channel.get(), method, ctx));
    if (stream->Write(HeaderMessage(opt_, step, base_step, server_lr_)))
      WriteRawPush(stream.get(), pushes);
    stream->WritesDone();
    got = std::make_unique<ResultReader>(*impl_, out);
    const bool ok = got->Read(stream.get());
    transport::ThrowIfError(stream->Finish(), "PushPull");
    GP_ENFORCE(ok && got->header.step() >= 0, "PushPull: server sent no result");
    return 0;
  });
  FillFromHeader(got->header, rpc.ElapsedMs(), &st);
  st.decode_ms = got->DecodeRest();
  st.bytes_down = got->bytes;
  return st;
}

StepStats PsClient::Push(int64_t step, const std::vector<torch::Tensor>& grads, int64_t base_step) {
  StepStats st;
  const std::vector<KeyPush> pushes = EncodeAll(*impl_, step, grads, &st);
  const grpc::internal::RpcMethod method(kPushMethod, grpc::internal::RpcMethod::CLIENT_STREAMING,
                                         impl_->channel);
  Timer rpc;
  proto::PushReply reply = WithRetry(opt_, "Push", [&](grpc::ClientContext* ctx) {
    proto::PushReply r;
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(impl_->channel.get(), method,
                                                                      ctx, &r));
    if (writer->Write(HeaderMessage(opt_, step, base_step, server_lr_)))
      WriteRawPush(writer.get(), pushes);
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
  const grpc::internal::RpcMethod method(kPullMethod, grpc::internal::RpcMethod::SERVER_STREAMING,
                                         impl_->channel);
  Timer rpc;
  std::unique_ptr<ResultReader> got;
  WithRetry(opt_, "Pull", [&](grpc::ClientContext* ctx) {
    std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
        grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(impl_->channel.get(), method,
                                                                      ctx, req));
    got = std::make_unique<ResultReader>(*impl_, out);
    const bool ok = got->Read(reader.get());
    transport::ThrowIfError(reader->Finish(), "Pull");
    GP_ENFORCE(ok, "Pull: server sent no result");
    return 0;
  });
  FillFromHeader(got->header, rpc.ElapsedMs(), &st);
  st.decode_ms = got->DecodeRest();
  st.bytes_down = got->bytes;
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
