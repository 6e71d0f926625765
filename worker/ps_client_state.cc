// PsClient, part two: the weights (initial, published, pulled), method 6's elections,
// heartbeats and the server's stats.
#include <string>
#include <string_view>

#include "common/timer.h"
#include "transport/status.h"
#include "worker/ps_client_internal.h"
#include "worker/ps_client_wire.h"

namespace gradpress::worker {

// Streams lossless weights through InitWeights or PublishWeights; returns `accepted`.
bool PsClient::UploadWeights(bool publish, int64_t round,
                             const std::vector<torch::Tensor>& params) {
  const char* what = publish ? "PublishWeights" : "InitWeights";
  CheckTensors(params, what);
  std::vector<KeyPush> pushes;
  for (KeyPayload& kp : WeightPayloads(model(), params)) pushes.push_back({std::move(kp), {}});
  return WithRetry(*impl_, opt_, what, [&](grpc::ClientContext* ctx) {
    transport::RawCall call(impl_->raw.get(), transport::MethodPath(what), ctx);
    if (call.Write(HeaderMessage(opt_, round, 0, std::nullopt))) WriteRawPush(&call, pushes);
    call.WritesDone();
    return ReadReply<proto::InitReply>(&call, what).accepted();
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
  CheckTensors(*params, "PullWeights");
  proto::PullRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_step(min_version);
  std::unique_ptr<ResultReader> got;
  WithRetry(*impl_, opt_, "PullWeights", [&](grpc::ClientContext* ctx) {
    transport::RawCall call(impl_->raw.get(), transport::MethodPath("PullWeights"), ctx);
    call.Write(RequestMessage(req));
    call.WritesDone();
    got = std::make_unique<ResultReader>(*this, params, 0, model().size());
    const bool ok = got->Read(&call);
    transport::ThrowIfError(call.Finish(), "PullWeights");
    GP_ENFORCE(ok, "PullWeights: server sent no weights");
    return 0;
  });
  got->DecodeRest();
}

std::pair<int, double> PsClient::Elect(int64_t round, double score) {
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

int64_t PsClient::Heartbeat() {
  proto::HeartbeatRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  for (auto& row : TakeReports()) *req.add_rows() = std::move(row);
  return WithRetry(*impl_, opt_, "Heartbeat", [&](grpc::ClientContext* ctx) {
    proto::HeartbeatReply r;
    transport::ThrowIfError(impl_->stub->Heartbeat(ctx, req, &r), "Heartbeat");
    return r.server_step();
  });
}

std::string PsClient::StatsText() {
  return WithRetry(*impl_, opt_, "Stats", [&](grpc::ClientContext* ctx) {
    proto::StatsReply r;
    transport::ThrowIfError(impl_->stub->Stats(ctx, proto::StatsRequest{}, &r), "Stats");
    return r.prometheus();
  });
}

}  // namespace gradpress::worker
