// GrpcPsClient (grpc_ps_client.h): the channel, registration, heartbeats, method 6's
// elections and the server's stats -- the unary calls. The calls that carry tensors are in
// grpc_tensor_calls.cc.
#include "worker/client/grpc_ps_client.h"

#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <chrono>

#include "common/error.h"
#include "transport/chunks.h"
#include "transport/grpc_process.h"
#include "transport/status.h"
#include "worker/client/grpc_calls.h"
#include "worker/client/row_outbox.h"

namespace gradpress::worker {

GrpcPsClient::GrpcPsClient(ClientOptions options) : GrpcPsClient(options, nullptr) {}

GrpcPsClient::GrpcPsClient(ClientOptions options, KeyCodecs* codecs)
    : opt_(std::move(options)),
      owned_codecs_(codecs ? nullptr : std::make_unique<KeyCodecs>(opt_)),
      codecs_(codecs ? codecs : owned_codecs_.get()),
      impl_(new Impl) {
  impl_->security = transport::LoadClientSecurity(opt_.security);  // files, token rules
  if (opt_.faults.ClientSide()) {
    impl_->faults = std::make_unique<transport::FaultInjector>(opt_.faults,
                                                               transport::StreamOf(opt_.worker_id));
  }
  transport::ConfigureGrpcProcess();
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(8 << 20);
  impl_->security.Apply(&args);
  impl_->channel = grpc::CreateCustomChannel(opt_.server, impl_->security.credentials, args);
  impl_->stub = proto::ParameterServer::NewStub(impl_->channel);
  impl_->raw = std::make_unique<grpc::GenericStub>(impl_->channel);
}

GrpcPsClient::~GrpcPsClient() = default;

uint64_t GrpcPsClient::retries() const { return impl_->retries.load(std::memory_order_relaxed); }
uint64_t GrpcPsClient::faults_injected() const {
  return impl_->faults ? impl_->faults->injected() : 0;
}

std::string GaveUpMessage(const GrpcPsClient::Impl& impl, const ClientOptions& opt,
                          const char* what, int attempts, const std::string& last) {
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

RegisterInfo GrpcPsClient::Register(const std::vector<TensorSpec>& model,
                                    const std::vector<int>& bucket_keys, int64_t catch_up_step) {
  proto::RegisterRequest req;
  for (int n : KeyCodecs::CheckSplit(model.size(), bucket_keys)) req.add_bucket_keys(n);
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_config_hash(opt_.config_hash);
  req.set_shard(opt_.shard);
  req.set_shards(opt_.shards);
  req.set_placement_hash(opt_.placement_hash);
  req.set_catch_up_step(catch_up_step);
  for (const auto& s : model) transport::ToProto(s, req.add_model());
  proto::RegisterReply reply = WithRetry(*impl_, opt_, "Register", [&](grpc::ClientContext* ctx) {
    proto::RegisterReply r;
    transport::ThrowIfError(impl_->stub->Register(ctx, req, &r), "Register");
    return r;
  });
  codecs_->SetModel(model, bucket_keys);
  if (opt_.heartbeat_s > 0 && !impl_->hb_thread.joinable()) StartHeartbeats();
  return {reply.rank(), reply.world_size(), reply.server_step(), reply.initialized()};
}

void GrpcPsClient::StartHeartbeats() {
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

std::pair<int, double> GrpcPsClient::Elect(int64_t round, double score) {
  proto::ElectRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_round(round);
  req.set_score(score);
  const proto::ElectReply r = WithRetry(*impl_, opt_, "Elect", [&](grpc::ClientContext* ctx) {
    proto::ElectReply reply;
    transport::ThrowIfError(impl_->stub->Elect(ctx, req, &reply), "Elect");
    return reply;
  });
  return {r.best_rank(), r.best_score()};
}

int64_t GrpcPsClient::Heartbeat() {
  proto::HeartbeatRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  if (opt_.rows)
    for (auto& row : opt_.rows->Take()) *req.add_rows() = std::move(row);
  return WithRetry(*impl_, opt_, "Heartbeat", [&](grpc::ClientContext* ctx) {
    proto::HeartbeatReply r;
    transport::ThrowIfError(impl_->stub->Heartbeat(ctx, req, &r), "Heartbeat");
    return r.server_step();
  });
}

void GrpcPsClient::Broadcast(const std::string& name, int64_t round, bool root, std::string* data) {
  proto::BroadcastRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_name(name);
  req.set_round(round);
  req.set_root(root);
  // Pieces of at most transport::kChunkBytes each way (one unary call each, as the server
  // answers), so no message nears gRPC's limit.
  auto call = [&](uint64_t offset, proto::BroadcastReply* reply) {
    req.set_offset(offset);
    WithRetry(*impl_, opt_, "Broadcast", [&](grpc::ClientContext* ctx) {
      // A reader waits on the server for the root until the server's deadline (server.
      // deadline_s, the job's, as ours): its answer, timed_out, comes before ours expires.
      if (!root)
        ctx->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::duration_cast<std::chrono::system_clock::duration>(
                              std::chrono::duration<double>(opt_.deadline_s + 10)));
      try {
        transport::ThrowIfError(impl_->stub->Broadcast(ctx, req, reply), "Broadcast");
      } catch (const Unavailable& e) {
        if (root || e.reason() != Reason::kTimedOut) throw;  // retried
        throw FailedPrecondition(
            fmt::format("broadcast '{}' round {}: the root sent nothing within {:g} s "
                        "(server.deadline_s); did every worker make the same broadcasts? ({})",
                        name, round, opt_.deadline_s, e.message()),
            Reason::kTimedOut);
      }
      return 0;
    });
  };
  proto::BroadcastReply reply;
  if (root) {
    req.set_total_bytes(data->size());
    uint64_t offset = 0;
    do {  // an empty value is one empty piece
      const uint64_t n = std::min<uint64_t>(transport::kChunkBytes, data->size() - offset);
      req.set_data(data->data() + offset, n);
      call(offset, &reply);
      offset += n;
    } while (offset < data->size());
    return;
  }
  data->clear();
  do {
    call(data->size(), &reply);
    GP_ENFORCE(reply.data().size() <= reply.total_bytes() - data->size() &&
                   (!reply.data().empty() || data->size() == reply.total_bytes()),
               "Broadcast: the server sent a piece of ", reply.data().size(), " bytes at offset ",
               data->size(), " of ", reply.total_bytes());
    if (data->empty()) data->reserve(reply.total_bytes());
    data->append(reply.data());
  } while (data->size() < reply.total_bytes());
}

std::string GrpcPsClient::StatsText() {
  return WithRetry(*impl_, opt_, "Stats", [&](grpc::ClientContext* ctx) {
    proto::StatsReply r;
    transport::ThrowIfError(impl_->stub->Stats(ctx, proto::StatsRequest{}, &r), "Stats");
    return r.prometheus();
  });
}

}  // namespace gradpress::worker
