#include "server/parameter_service.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "transport/chunks.h"
#include "transport/security.h"
#include "transport/status.h"
#include "transport/wire.h"

namespace gradpress::server {
namespace {

using transport::RawStream;

WorkerId Id(const std::string& name, uint64_t incarnation) { return {name, incarnation}; }

// A call's messages as the frames of a push stream.
struct StreamFrames : PushFrameReader {
  explicit StreamFrames(RawStream* s) : stream(s) {}
  bool Read(grpc::ByteBuffer* frame) override { return stream->Read(frame); }
  RawStream* stream;
};

// The result as raw messages: the header and chunks whose data are views of `r`'s payloads
// (each slice holds a reference to `r`), small payloads gathered into one message.
void WriteRawResult(RawStream* stream, std::shared_ptr<const StepResult> r, double wait_ms,
                    double server_ms, ParameterStore* store) {
  proto::PullHeader h;
  h.set_step(r->step);
  h.set_wait_ms(wait_ms);
  h.set_server_ms(server_ms);
  h.set_contributors(r->contributors);
  transport::MessageWriter out([stream](grpc::ByteBuffer b) { return stream->Write(b); });
  out.Header(h);
  uint64_t bytes = 0;
  for (const auto& kp : r->payloads) {
    proto::TensorChunk meta;
    meta.set_key(kp.key);
    meta.set_codec(kp.payload.codec);
    for (int64_t d : kp.payload.shape) meta.add_shape(d);
    meta.set_dtype(static_cast<uint32_t>(kp.payload.dtype));
    const std::string& data = kp.payload.bytes;
    GP_ENFORCE_AS(Unavailable, out.Payload(meta, data.data(), data.size(), r), "client went away");
    bytes += data.size();
  }
  GP_ENFORCE_AS(Unavailable, out.Flush(), "client went away");
  store->CountBytesOut(bytes);
}

template <typename Message>
void ReadRequest(RawStream* stream, Message* msg) {
  grpc::ByteBuffer buffer;
  GP_ENFORCE(stream->Read(&buffer), "request stream ended before its message");
  GP_ENFORCE(grpc::SerializationTraits<Message>::Deserialize(&buffer, msg).ok(),
             "malformed request message");
}

template <typename Message>
void WriteReply(RawStream* stream, const Message& msg) {
  grpc::ByteBuffer buffer;
  bool own = false;
  GP_ENFORCE_AS(Internal, grpc::SerializationTraits<Message>::Serialize(msg, &buffer, &own).ok(),
                "cannot serialize the reply");
  GP_ENFORCE_AS(Unavailable, stream->Write(buffer), "client went away");
}

}  // namespace

ParameterService::ParameterService(ParameterStore* store, double deadline_s, ServiceGate gate,
                                   Dashboard* dashboard)
    : store_(store), dashboard_(dashboard), deadline_s_(deadline_s), token_(std::move(gate.token)) {
  if (gate.faults.ServerSide()) faults_ = std::make_unique<transport::FaultInjector>(gate.faults);
}

ParameterService::~ParameterService() {
  handlers_.Join(TaskThreads::Clock::now() + std::chrono::seconds(10));
}

grpc::Status ParameterService::Admit(const grpc::ServerContextBase& ctx) {
  if (!token_.empty()) {
    grpc::Status s = transport::CheckToken(ctx, token_);
    if (!s.ok()) {
      store_->CountRejected("unauthenticated");
      const uint64_t n = ++refused_;
      if (n <= 10 || n % 1000 == 0)
        spdlog::warn("refused a call from {}: {} ({} refused so far)", ctx.peer(),
                     s.error_message(), n);
      return s;
    }
  }
  if (faults_ && faults_->NextFail()) {
    store_->CountFaultInjected();
    return {grpc::StatusCode::UNAVAILABLE, "injected fault"};
  }
  return grpc::Status::OK;
}

template <typename Fn>
grpc::Status ParameterService::Serve(const grpc::ServerContextBase& ctx, Fn&& body) {
  if (grpc::Status denied = Admit(ctx); !denied.ok()) return denied;
  try {
    body();
    return grpc::Status::OK;
  } catch (...) {
    return transport::ToStatus(std::current_exception());
  }
}

Clock::time_point ParameterService::Deadline(const grpc::ServerContextBase& ctx) const {
  const auto ours = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(deadline_s_));
  const auto theirs = ctx.deadline();  // system_clock
  const auto left = theirs - std::chrono::system_clock::now();
  if (left < std::chrono::hours(24 * 365))
    return std::min(ours, Clock::now() + std::chrono::duration_cast<Clock::duration>(left));
  return ours;
}

grpc::Status ParameterService::Register(grpc::ServerContext* ctx, const proto::RegisterRequest* req,
                                        proto::RegisterReply* reply) {
  return Serve(*ctx, [&] {
    std::vector<TensorSpec> model;
    for (const auto& s : req->model()) model.push_back(transport::FromProto(s));
    const std::vector<int> buckets(req->bucket_keys().begin(), req->bucket_keys().end());
    const RegisterResult r = store_->Register(
        Id(req->worker_id(), req->incarnation()), model, req->config_hash(), buckets,
        {req->shard(), req->shards(), req->placement_hash(), req->catch_up_step()});
    reply->set_rank(r.rank);
    reply->set_world_size(r.world_size);
    reply->set_server_step(r.server_step);
    reply->set_initialized(r.initialized);
  });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterService::InitWeights(Ctx* ctx,
                                                                         grpc::ByteBuffer* reply) {
  return transport::ServeClientStream(ctx, &handlers_, reply, [this](Ctx* c, RawStream* stream) {
    return Serve(*c, [&] {
      StreamFrames frames(stream);
      const WholePush push = ReadWholePush(&frames, store_->model());
      proto::InitReply r;
      r.set_accepted(store_->InitWeights(Id(push.header.worker_id(), push.header.incarnation()),
                                         push.payloads));
      WriteReply(stream, r);
    });
  });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ParameterService::PullWeights(
    Ctx* ctx, const grpc::ByteBuffer* request) {
  return transport::ServeServerStream(ctx, &handlers_, request, [this](Ctx* c, RawStream* stream) {
    return Serve(*c, [&] {
      proto::PullRequest req;
      ReadRequest(stream, &req);
      const WorkerId w = Id(req.worker_id(), req.incarnation());
      auto r = req.momentum() ? store_->ShadowMomentum(w)
                              : store_->Weights(w, std::max<int64_t>(0, req.step()), Deadline(*c),
                                                req.wait_init());
      WriteRawResult(stream, r, 0, 0, store_);
    });
  });
}

WholePush ReadWholePush(PushFrameReader* frames, const std::vector<TensorSpec>& model) {
  WholePush push;
  grpc::ByteBuffer buffer;
  transport::WireMessage m;
  GP_ENFORCE(frames->Read(&buffer), "push stream ended before its header");
  transport::ParseMessage(&buffer, &m);
  GP_ENFORCE(m.has_header && push.header.ParseFromString(m.header),
             "push stream must start with a PushHeader");
  GP_REFUSE(NotFound, Reason::kNotRegistered, !model.empty(), "worker '", push.header.worker_id(),
            "' is not registered (no model yet)");
  transport::PayloadAssembler assembler(model);
  transport::ForEachChunk(
      &m, [frames](grpc::ByteBuffer* b) { return frames->Read(b); },
      [&](const transport::WireChunk& c) { assembler.Add(c.chunk, c.data); }, "push");
  push.payloads = assembler.Finish();
  return push;
}

PushPullResult ReadPushStream(ParameterStore* store, PushFrameReader* frames,
                              Clock::time_point deadline, bool wait, Dashboard* dashboard) {
  grpc::ByteBuffer buffer;
  transport::WireMessage m;
  GP_ENFORCE(frames->Read(&buffer), "push stream ended before its header");
  transport::ParseMessage(&buffer, &m);
  proto::PushHeader h;
  GP_ENFORCE(m.has_header && h.ParseFromString(m.header),
             "push stream must start with a PushHeader");
  auto session = store->BeginPush(
      Id(h.worker_id(), h.incarnation()), h.step(), h.base_step(), deadline,
      h.has_lr() ? std::optional<double>(h.lr()) : std::nullopt, h.has_bucket() ? h.bucket() : -1,
      std::vector<double>(h.key_lr().begin(), h.key_lr().end()));
  if (dashboard && h.rows_size() > 0) dashboard->Add(h.rows());
  ParameterStore::Piece piece;
  transport::ForEachChunk(
      &m, [frames](grpc::ByteBuffer* b) { return frames->Read(b); },
      [&](const transport::WireChunk& w) {
        const proto::TensorChunk& c = w.chunk;
        piece.key = c.key();
        piece.codec = c.codec();
        piece.shape.assign(c.shape().begin(), c.shape().end());
        piece.dtype = c.dtype();
        piece.total_bytes = c.total_bytes();
        piece.offset = c.offset();
        if (w.data.empty()) session->Add(piece, {});
        for (std::string_view data : w.data) {
          session->Add(piece, data);
          piece.offset += data.size();
        }
      },
      "push");
  return session->Commit(wait);
}

PushPullResult ParameterService::StreamPush(const grpc::ServerContextBase& ctx, RawStream* stream,
                                            bool wait) {
  StreamFrames frames(stream);
  return ReadPushStream(store_, &frames, Deadline(ctx), wait, dashboard_);
}

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ParameterService::PushPull(Ctx* ctx) {
  return transport::ServeBidi(ctx, &handlers_, [this](Ctx* c, RawStream* stream) {
    return Serve(*c, [&] {
      PushPullResult r = StreamPush(*c, stream, /*wait=*/true);
      WriteRawResult(stream, r.result, r.wait_ms, r.apply_ms + r.result->server_ms, store_);
    });
  });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterService::Push(Ctx* ctx,
                                                                  grpc::ByteBuffer* reply) {
  return transport::ServeClientStream(ctx, &handlers_, reply, [this](Ctx* c, RawStream* stream) {
    return Serve(*c, [&] {
      PushPullResult r = StreamPush(*c, stream, /*wait=*/false);
      proto::PushReply reply;
      reply.set_step(store_->step());
      reply.set_duplicate(r.duplicate);
      WriteReply(stream, reply);
    });
  });
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ParameterService::Pull(
    Ctx* ctx, const grpc::ByteBuffer* request) {
  return transport::ServeServerStream(ctx, &handlers_, request, [this](Ctx* c, RawStream* stream) {
    return Serve(*c, [&] {
      proto::PullRequest req;
      ReadRequest(stream, &req);
      auto r = store_->Pull(Id(req.worker_id(), req.incarnation()), req.step(), Deadline(*c),
                            req.has_bucket() ? req.bucket() : -1);
      WriteRawResult(stream, r, 0, r->server_ms, store_);
    });
  });
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ParameterService::PublishWeights(
    Ctx* ctx, grpc::ByteBuffer* reply) {
  return transport::ServeClientStream(ctx, &handlers_, reply, [this](Ctx* c, RawStream* stream) {
    return Serve(*c, [&] {
      StreamFrames frames(stream);
      const WholePush push = ReadWholePush(&frames, store_->model());
      store_->PublishWeights(Id(push.header.worker_id(), push.header.incarnation()),
                             push.header.step(), push.payloads);
      proto::InitReply r;
      r.set_accepted(true);
      WriteReply(stream, r);
    });
  });
}

grpc::Status ParameterService::Heartbeat(grpc::ServerContext* ctx,
                                         const proto::HeartbeatRequest* req,
                                         proto::HeartbeatReply* reply) {
  return Serve(*ctx, [&] {
    reply->set_server_step(store_->Heartbeat(Id(req->worker_id(), req->incarnation())));
    if (dashboard_ && req->rows_size() > 0) dashboard_->Add(req->rows());
    reply->set_live_workers(store_->Stats().live_workers);
  });
}

grpc::Status ParameterService::Stats(grpc::ServerContext* ctx, const proto::StatsRequest*,
                                     proto::StatsReply* reply) {
  return Serve(*ctx, [&] {
    const StoreStats s = store_->Stats();
    reply->set_steps(s.steps);
    reply->set_bytes_in(s.bytes_in);
    reply->set_bytes_out(s.bytes_out);
    reply->set_live_workers(s.live_workers);
    for (const auto& [reason, n] : s.rejected) (*reply->mutable_rejected())[reason] = n;
    reply->set_mean_step_server_ms(s.mean_server_ms);
    reply->set_prometheus(s.Prometheus());
  });
}

grpc::Status ParameterService::Broadcast(grpc::ServerContext* ctx,
                                         const proto::BroadcastRequest* req,
                                         proto::BroadcastReply* reply) {
  return Serve(*ctx, [&] {
    const WorkerId w = Id(req->worker_id(), req->incarnation());
    if (req->root()) {
      store_->BroadcastPut(w, req->name(), req->round(), req->total_bytes(), req->offset(),
                           req->data());
      reply->set_total_bytes(req->total_bytes());
      return;
    }
    const auto value = store_->BroadcastGet(w, req->name(), req->round(), Deadline(*ctx));
    GP_REFUSE(InvalidArgument, Reason::kBadRequest, req->offset() <= value->size(), "worker '",
              w.name, "': broadcast '", req->name(), "' has ", value->size(),
              " bytes; asked from offset ", req->offset());
    reply->set_total_bytes(value->size());
    reply->set_data(value->substr(req->offset(), transport::kChunkBytes));
  });
}

grpc::Status ParameterService::Elect(grpc::ServerContext* ctx, const proto::ElectRequest* req,
                                     proto::ElectReply* reply) {
  return Serve(*ctx, [&] {
    const auto [rank, score] = store_->Elect(Id(req->worker_id(), req->incarnation()), req->round(),
                                             req->score(), Deadline(*ctx));
    reply->set_best_rank(rank);
    reply->set_best_score(score);
  });
}

}  // namespace gradpress::server
