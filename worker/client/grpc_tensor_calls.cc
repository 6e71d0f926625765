// GrpcPsClient (grpc_ps_client.h): the streamed calls that carry tensors -- a step's push and
// pull, the async push and pull, and the weights (initial, published, pulled).
#include <string>

#include "common/timer.h"
#include "transport/status.h"
#include "worker/client/grpc_calls.h"
#include "worker/client/grpc_wire.h"
#include "worker/client/row_outbox.h"

namespace gradpress::worker {

StepMetrics GrpcPsClient::PushPull(const StepCall& call, const std::vector<torch::Tensor>& grads,
                                   std::vector<torch::Tensor>* out) {
  const KeyCodecs::CallKeys keys = codecs_->Keys(call.bucket);
  UplinkTurn turn(call.uplink);  // our turn on the uplink, while encoding and writing
  turn.Take();
  StepMetrics st;
  const std::vector<KeyPush> pushes =
      codecs_->Encode(call.step, grads, keys.begin, keys.end, &st, call.ready);
  if (call.wait) codecs_->CheckTensors(*out, "PushPull output", keys.begin, keys.end);
  // The dashboard's rows: taken once, sent again with a retry.
  const std::vector<proto::WorkerRow> rows =
      opt_.rows ? opt_.rows->Take() : std::vector<proto::WorkerRow>{};
  proto::PushHeader header =
      PushHeaderFor(opt_, call.step, call.base_step, call.lr, keys.bucket, rows);
  for (double lr : CallKeyLr(call, keys.begin, keys.end)) header.add_key_lr(lr);
  Timer rpc;
  std::unique_ptr<ResultReader> got;
  const char* what = call.wait ? "PushPull" : "Push";
  proto::PushReply reply = WithRetry(
      *impl_, opt_, what,
      [&](grpc::ClientContext* ctx) {
        transport::RawCall rpc_call(impl_->raw.get(), transport::MethodPath(what), ctx);
        turn.Take();
        WriteRawPush(&rpc_call, header, pushes);
        rpc_call.WritesDone();
        turn.Give();  // the next bucket's push goes out while this one is completed and pulled
        if (!call.wait) return ReadReply<proto::PushReply>(&rpc_call, what);
        got = std::make_unique<ResultReader>(*codecs_, out, keys.begin, keys.end, call.decoded);
        const bool ok = got->Read(&rpc_call);
        transport::ThrowIfError(rpc_call.Finish(), what);
        GP_ENFORCE(ok && got->header().step() >= 0, what, ": server sent no result");
        return proto::PushReply{};
      },
      &st.retries);
  if (!call.wait) {
    st.network_ms = rpc.ElapsedMs();
    st.server_step = reply.step();
    st.duplicate = reply.duplicate();
    return st;
  }
  FillFromHeader(got->header(), rpc.ElapsedMs(), &st);
  st.decode_ms = got->DecodeRest();
  st.bytes_down = got->bytes();
  return st;
}

StepMetrics GrpcPsClient::Pull(std::vector<torch::Tensor>* out, int64_t step) {
  codecs_->CheckTensors(*out, "Pull");
  StepMetrics st;
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
        got = std::make_unique<ResultReader>(*codecs_, out, 0, codecs_->model().size());
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

// Streams lossless weights through InitWeights or PublishWeights; returns `accepted`.
bool GrpcPsClient::UploadWeights(bool publish, int64_t round,
                                 const std::vector<torch::Tensor>& params) {
  const char* what = publish ? "PublishWeights" : "InitWeights";
  codecs_->CheckTensors(params, what);
  std::vector<KeyPush> pushes;
  for (compressors::KeyPayload& kp : WeightPayloads(codecs_->model(), params))
    pushes.push_back({std::move(kp), {}});
  return WithRetry(*impl_, opt_, what, [&](grpc::ClientContext* ctx) {
    transport::RawCall call(impl_->raw.get(), transport::MethodPath(what), ctx);
    WriteRawPush(&call, PushHeaderFor(opt_, round, 0, std::nullopt), pushes);
    call.WritesDone();
    return ReadReply<proto::InitReply>(&call, what).accepted();
  });
}

bool GrpcPsClient::InitOrPull(std::vector<torch::Tensor>* params) {
  const bool accepted = UploadWeights(/*publish=*/false, 0, *params);
  PullWeights(params, 0);
  return accepted;
}

void GrpcPsClient::PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) {
  UploadWeights(/*publish=*/true, round, params);
}

void GrpcPsClient::AwaitInitWeights(std::vector<torch::Tensor>* params) {
  ReadWeights(params, 0, /*wait_init=*/true);
}

void GrpcPsClient::PullWeights(std::vector<torch::Tensor>* params, int64_t min_version) {
  ReadWeights(params, min_version, /*wait_init=*/false);
}

void GrpcPsClient::PullMomentum(std::vector<torch::Tensor>* buffers) {
  ReadWeights(buffers, 0, /*wait_init=*/false, /*momentum=*/true);
}

void GrpcPsClient::ReadWeights(std::vector<torch::Tensor>* params, int64_t min_version,
                               bool wait_init, bool momentum) {
  codecs_->CheckTensors(*params, "PullWeights");
  proto::PullRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_step(min_version);
  req.set_wait_init(wait_init);
  req.set_momentum(momentum);
  std::unique_ptr<ResultReader> got;
  WithRetry(*impl_, opt_, "PullWeights", [&](grpc::ClientContext* ctx) {
    transport::RawCall call(impl_->raw.get(), transport::MethodPath("PullWeights"), ctx);
    call.Write(RequestMessage(req));
    call.WritesDone();
    got = std::make_unique<ResultReader>(*codecs_, params, 0, codecs_->model().size());
    const bool ok = got->Read(&call);
    transport::ThrowIfError(call.Finish(), "PullWeights");
    GP_ENFORCE(ok, "PullWeights: server sent no weights");
    return 0;
  });
  got->DecodeRest();
}

}  // namespace gradpress::worker
