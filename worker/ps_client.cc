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
#include "transport/raw_client.h"
#include "transport/status.h"
#include "worker/ps_client_internal.h"
#include "worker/ps_client_wire.h"

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
  impl_->raw = std::make_unique<grpc::GenericStub>(impl_->channel);
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
  req.set_shard(opt_.shard);
  req.set_shards(opt_.shards);
  req.set_placement_hash(opt_.placement_hash);
  req.set_catch_up_step(opt_.catch_up_step);
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
    p.payload.payload = c.EncodePush(i, grads[i], {c.model()[i].key, step});
    st->bytes_up += p.payload.payload.bytes.size();
  }
  st->encode_ms = t.ElapsedMs();
  return pushes;
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
  StepStats enc;
  const auto [begin, end] = Keys(bucket);
  std::vector<KeyPush> pushes = EncodeAll(*this, step, grads, &enc, begin, end);
  CheckTensors(*out, "PushPull output", begin, end);
  StepStats st = Send(step, base_step, bucket, pushes, out, &turn);
  st.encode_ms = enc.encode_ms;
  st.bytes_up = enc.bytes_up;
  if (opt_.shards > 1 && bucket < 0) {  // kept until the next step completes
    for (KeyPush& p : pushes)
      if (p.raw.defined()) p.raw = p.raw.clone();  // raw aliases the gradient
    impl_->kept = std::move(pushes);
    impl_->kept_step = step;
  }
  return st;
}

StepStats PsClient::Send(int64_t step, int64_t base_step, int bucket,
                         const std::vector<KeyPush>& pushes, std::vector<torch::Tensor>* out,
                         UplinkTurn* turn) {
  const auto [begin, end] = Keys(bucket);
  StepStats st;
  const std::vector<proto::WorkerRow> rows = TakeReports();  // sent again with a retry
  Timer rpc;
  std::unique_ptr<ResultReader> got;
  WithRetry(
      *impl_, opt_, "PushPull",
      [&](grpc::ClientContext* ctx) {
        transport::RawCall call(impl_->raw.get(), transport::MethodPath("PushPull"), ctx);
        turn->Take();
        if (call.Write(HeaderMessage(opt_, step, base_step, server_lr_, bucket, rows)))
          WriteRawPush(&call, pushes);
        call.WritesDone();
        turn->Give();  // the next bucket's push goes out while this one is completed and pulled
        got = std::make_unique<ResultReader>(*this, out, begin, end);
        const bool ok = got->Read(&call);
        transport::ThrowIfError(call.Finish(), "PushPull");
        GP_ENFORCE(ok && got->header().step() >= 0, "PushPull: server sent no result");
        return 0;
      },
      &st.retries);
  FillFromHeader(got->header(), rpc.ElapsedMs(), &st);
  st.decode_ms = got->DecodeRest();
  st.bytes_down = got->bytes();
  return st;
}

bool PsClient::RepushKept(int64_t step) {
  if (impl_->kept_step != step || impl_->kept.empty()) return false;
  std::vector<torch::Tensor> scratch;  // the result: this worker applied it already
  for (const TensorSpec& t : model()) scratch.push_back(torch::zeros(t.shape));
  UplinkTurn turn(nullptr);
  Send(step, 0, -1, impl_->kept, &scratch, &turn);
  return true;
}

StepStats PsClient::Push(int64_t step, const std::vector<torch::Tensor>& grads, int64_t base_step) {
  StepStats st;
  const std::vector<KeyPush> pushes = EncodeAll(*this, step, grads, &st, 0, model().size());
  const std::vector<proto::WorkerRow> rows = TakeReports();
  Timer rpc;
  proto::PushReply reply = WithRetry(
      *impl_, opt_, "Push",
      [&](grpc::ClientContext* ctx) {
        transport::RawCall call(impl_->raw.get(), transport::MethodPath("Push"), ctx);
        if (call.Write(HeaderMessage(opt_, step, base_step, server_lr_, -1, rows)))
          WriteRawPush(&call, pushes);
        call.WritesDone();
        return ReadReply<proto::PushReply>(&call, "Push");
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
  Timer rpc;
  std::unique_ptr<ResultReader> got;
  WithRetry(
      *impl_, opt_, "Pull",
      [&](grpc::ClientContext* ctx) {
        transport::RawCall call(impl_->raw.get(), transport::MethodPath("Pull"), ctx);
        call.Write(RequestMessage(req));
        call.WritesDone();
        got = std::make_unique<ResultReader>(*this, out, 0, model().size());
        const bool ok = got->Read(&call);
        transport::ThrowIfError(call.Finish(), "Pull");
        GP_ENFORCE(ok, "Pull: server sent no result");
        return 0;
      },
      &st.retries);
  FillFromHeader(got->header(), rpc.ElapsedMs(), &st);
  st.decode_ms = got->DecodeRest();
  st.bytes_down = got->bytes();
  return st;
}

}  // namespace gradpress::worker
