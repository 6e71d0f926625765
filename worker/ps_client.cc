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
#include "common/shape.h"
#include "common/timer.h"
#include "compressors/momentum_correction.h"
#include "compressors/registry.h"
#include "proto/gradpress.grpc.pb.h"
#include "transport/chunks.h"
#include "transport/status.h"
#include "transport/wire.h"
#include "worker/ps_client_internal.h"

namespace gradpress::worker {

PsClient::PsClient(ClientOptions options) : ServerClient(std::move(options)), impl_(new Impl) {
  impl_->security = transport::LoadClientSecurity(opt_.security);  // files, token rules
  if (opt_.faults.ClientSide()) {
    impl_->faults = std::make_unique<transport::FaultInjector>(opt_.faults,
                                                               transport::StreamOf(opt_.worker_id));
  }
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  impl_->security.Apply(&args);
  impl_->channel = grpc::CreateCustomChannel(opt_.server, impl_->security.credentials, args);
  impl_->stub = proto::ParameterServer::NewStub(impl_->channel);
}

PsClient::~PsClient() = default;

uint64_t PsClient::retries() const { return impl_->retries.load(std::memory_order_relaxed); }
uint64_t PsClient::faults_injected() const { return impl_->faults ? impl_->faults->injected() : 0; }

std::string GaveUpMessage(const PsClient::Impl& impl, const ClientOptions& opt, const char* what,
                          int attempts, const std::string& last) {
  std::string msg = std::string(what) + " to " + opt.server + " failed after " +
                    std::to_string(attempts) + (attempts == 1 ? " attempt" : " attempts") +
                    " (server unavailable); last error: " + last;
  if (impl.security.tls) {
    msg +=
        " [TLS is on: a handshake failure means the server's certificate is not signed by "
        "security.ca or does not name the server (security.server_name), or the server wants a "
        "client certificate (security.client_cert) signed by its security.client_ca]";
  }
  return msg;
}

RegisterInfo PsClient::Register(const std::vector<TensorSpec>& model,
                                const std::vector<int>& bucket_keys) {
  std::vector<std::pair<size_t, size_t>> buckets = SplitBuckets(model, bucket_keys);
  proto::RegisterRequest req;
  if (buckets.size() > 1)
    for (int n : bucket_keys) req.add_bucket_keys(n);
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_config_hash(opt_.config_hash);
  for (const auto& s : model) transport::ToProto(s, req.add_model());
  proto::RegisterReply reply = WithRetry(*impl_, opt_, "Register", [&](grpc::ClientContext* ctx) {
    proto::RegisterReply r;
    transport::ThrowIfError(impl_->stub->Register(ctx, req, &r), "Register");
    return r;
  });
  SetModel(model, std::move(buckets));
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
        grpc::ClientContext ctx;  // no injected faults: heartbeats only keep us alive
        ctx.set_deadline(std::chrono::system_clock::now() +
                         std::chrono::duration_cast<std::chrono::system_clock::duration>(period));
        if (!impl_->security.header.empty())
          ctx.AddMetadata(transport::kAuthorizationKey, impl_->security.header);
        const grpc::Status s = impl_->stub->Heartbeat(&ctx, req, &r);
        if (!s.ok()) spdlog::warn("{} heartbeat: {}", opt_.worker_id, s.error_message());
        lock.lock();
      }
    });
  }
  return {reply.rank(), reply.world_size(), reply.server_step(), reply.initialized()};
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

// Encodes the keys [begin, end) (a bucket; 0, n: the whole model).
std::vector<KeyPush> EncodeAll(ServerClient& c, int64_t step,
                               const std::vector<torch::Tensor>& grads, StepStats* st, size_t begin,
                               size_t end) {
  c.CheckTensors(grads, "push", begin, end);
  Timer t;
  std::vector<KeyPush> pushes(end - begin);
  for (size_t i = begin; i < end; ++i) {
    KeyPush& p = pushes[i - begin];
    p.payload.key = c.model()[i].key;
    if (c.push_codec(i).IsLossless()) {  // the payload is the tensor's memory itself
      p.raw = grads[i].detach().to(torch::kCPU, torch::kFloat32).contiguous();
      p.payload.payload.codec = c.push_codec(i).Name();
      p.payload.payload.shape = c.model()[i].shape;
      st->bytes_up += p.raw.numel() * sizeof(float);
      continue;
    }
    p.payload.payload = c.push_codec(i).Encode(grads[i], {c.model()[i].key, step});
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
                               std::optional<double> lr, int bucket = -1) {
  proto::PushMessage msg;
  FillHeader(opt, step, base_step, lr, &msg, bucket);
  return transport::FrameHeader(msg.header());
}

// Reads a reply stream: a PullHeader, then chunks. "none" payloads for CPU float32
// contiguous tensors are copied from the received slices straight into `out`; the others
// are reassembled and decoded once the stream has ended (DecodeRest). Returns false if the
// stream ended before its header (the status says why).
struct ResultReader {
  ServerClient& client;
  const std::vector<TensorSpec>& model;
  std::vector<torch::Tensor>* out;
  size_t begin, end;                 // the keys expected (a bucket, or the whole model)
  std::vector<TensorSpec> expected;  // model[begin, end): the assembler points into it
  proto::PullHeader header;
  std::vector<uint64_t> direct;  // per key: bytes copied into out (-1: not direct)
  transport::PayloadAssembler assembler;
  uint64_t bytes = 0;

  ResultReader(ServerClient& c, std::vector<torch::Tensor>* o, size_t b, size_t e)
      : client(c),
        model(c.model()),
        out(o),
        begin(b),
        end(e),
        expected(model.begin() + b, model.begin() + e),
        direct(model.size(), kNotDirect),
        assembler(expected) {}
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
    size_t i = begin;
    while (i < end && model[i].key != c.key()) ++i;
    GP_ENFORCE(i < end, "server sent unknown key '", c.key(), "'");
    torch::Tensor& o = (*out)[i];
    const uint64_t size = static_cast<uint64_t>(o.numel()) * sizeof(float);
    const bool can = client.Decoder(c.codec()).IsLossless() && o.device().is_cpu() &&
                     o.scalar_type() == torch::kFloat32 && o.is_contiguous() &&
                     c.total_bytes() == size &&
                     std::vector<int64_t>(c.shape().begin(), c.shape().end()) == model[i].shape;
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
    for (size_t i = begin; i < end; ++i) {
      if (direct[i] != kNotDirect) {
        GP_ENFORCE(direct[i] == static_cast<uint64_t>((*out)[i].numel()) * sizeof(float),
                   "server sent ", direct[i], " bytes of key '", model[i].key, "'");
        continue;
      }
      GP_ENFORCE(r < rest.size() && rest[r].key == model[i].key, "server sent no key '",
                 model[i].key, "'");
      const compressors::Payload& p = rest[r++].payload;
      bytes += p.bytes.size();
      GP_ENFORCE(p.shape == model[i].shape, "server sent key '", model[i].key, "' with shape ",
                 ShapeToString(p.shape));
      torch::Tensor& o = (*out)[i];
      if (o.device().is_cpu() && o.scalar_type() == torch::kFloat32 && o.is_contiguous()) {
        client.Decoder(p.codec).DecodeTo(p.bytes, o.numel(), o.data_ptr<float>());  // in place
      } else {
        torch::NoGradGuard no_grad;
        o.copy_(client.Decoder(p.codec).Decode(p));
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
  GP_ENFORCE(buckets() <= 1, "PushPull: the model is split into ", buckets(),
             " buckets: exchange them with PushPullBucket");
  return Exchange(step, base_step, -1, grads, out);
}

StepStats PsClient::PushPullBucket(int64_t step, int bucket,
                                   const std::vector<torch::Tensor>& grads,
                                   std::vector<torch::Tensor>* out, Uplink* upload) {
  BucketKeys(bucket);  // checks the index
  return Exchange(step, 0, buckets() > 1 ? bucket : -1, grads, out, upload);
}

StepStats PsClient::Exchange(int64_t step, int64_t base_step, int bucket,
                             const std::vector<torch::Tensor>& grads,
                             std::vector<torch::Tensor>* out, Uplink* upload) {
  UplinkTurn turn(upload);  // our turn on the uplink, while encoding and writing
  turn.Take();
  StepStats st;
  const auto [begin, end] = Keys(bucket);
  const std::vector<KeyPush> pushes = EncodeAll(*this, step, grads, &st, begin, end);
  CheckTensors(*out, "PushPull output", begin, end);
  const grpc::internal::RpcMethod method(kPushPullMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
                                         impl_->channel);
  Timer rpc;
  std::unique_ptr<ResultReader> got;
  WithRetry(
      *impl_, opt_, "PushPull",
      [&](grpc::ClientContext* ctx) {
        std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
            grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
                impl_->channel.get(), method, ctx));
        turn.Take();
        if (stream->Write(HeaderMessage(opt_, step, base_step, server_lr_, bucket)))
          WriteRawPush(stream.get(), pushes);
        stream->WritesDone();
        turn.Give();  // the next bucket's push goes out while this one is completed and pulled
        got = std::make_unique<ResultReader>(*this, out, begin, end);
        const bool ok = got->Read(stream.get());
        transport::ThrowIfError(stream->Finish(), "PushPull");
        GP_ENFORCE(ok && got->header.step() >= 0, "PushPull: server sent no result");
        return 0;
      },
      &st.retries);
  FillFromHeader(got->header, rpc.ElapsedMs(), &st);
  st.decode_ms = got->DecodeRest();
  st.bytes_down = got->bytes;
  return st;
}

StepStats PsClient::Push(int64_t step, const std::vector<torch::Tensor>& grads, int64_t base_step) {
  StepStats st;
  const std::vector<KeyPush> pushes = EncodeAll(*this, step, grads, &st, 0, model().size());
  const grpc::internal::RpcMethod method(kPushMethod, grpc::internal::RpcMethod::CLIENT_STREAMING,
                                         impl_->channel);
  Timer rpc;
  proto::PushReply reply = WithRetry(
      *impl_, opt_, "Push",
      [&](grpc::ClientContext* ctx) {
        proto::PushReply r;
        std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
            grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(impl_->channel.get(),
                                                                          method, ctx, &r));
        if (writer->Write(HeaderMessage(opt_, step, base_step, server_lr_)))
          WriteRawPush(writer.get(), pushes);
        writer->WritesDone();
        transport::ThrowIfError(writer->Finish(), "Push");
        return r;
      },
      &st.retries);
  st.network_ms = rpc.ElapsedMs();
  st.server_step = reply.step();
  st.duplicate = reply.duplicate();
  return st;
}

StepStats PsClient::Pull(std::vector<torch::Tensor>* out, int64_t step) {
  CheckTensors(*out, "Pull");
  StepStats st;
  proto::PullRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_step(step);
  const grpc::internal::RpcMethod method(kPullMethod, grpc::internal::RpcMethod::SERVER_STREAMING,
                                         impl_->channel);
  Timer rpc;
  std::unique_ptr<ResultReader> got;
  WithRetry(
      *impl_, opt_, "Pull",
      [&](grpc::ClientContext* ctx) {
        std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
            grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(impl_->channel.get(),
                                                                          method, ctx, req));
        got = std::make_unique<ResultReader>(*this, out, 0, model().size());
        const bool ok = got->Read(reader.get());
        transport::ThrowIfError(reader->Finish(), "Pull");
        GP_ENFORCE(ok, "Pull: server sent no result");
        return 0;
      },
      &st.retries);
  FillFromHeader(got->header, rpc.ElapsedMs(), &st);
  st.decode_ms = got->DecodeRest();
  st.bytes_down = got->bytes;
  return st;
}

}  // namespace gradpress::worker
