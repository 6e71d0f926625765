// PsClient, part two: the weights (initial, published, pulled), method 6's elections,
// heartbeats and the server's stats.
#include <string>
#include <string_view>

#include "common/timer.h"
#include "transport/status.h"
#include "worker/ps_client_internal.h"

namespace gradpress::worker {

// Streams lossless weights through InitWeights or PublishWeights; returns `accepted`.
bool PsClient::UploadWeights(bool publish, int64_t round,
                             const std::vector<torch::Tensor>& params) {
  CheckTensors(params, publish ? "PublishWeights" : "InitWeights");
  const std::vector<KeyPayload> payloads = WeightPayloads(model(), params);
  return WithRetry(
      *impl_, opt_, publish ? "PublishWeights" : "InitWeights", [&](grpc::ClientContext* ctx) {
        proto::InitReply reply;
        auto writer = publish ? impl_->stub->PublishWeights(ctx, &reply)
                              : impl_->stub->InitWeights(ctx, &reply);
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
  CheckTensors(*params, "PullWeights");
  proto::PullRequest req;
  req.set_worker_id(opt_.worker_id);
  req.set_incarnation(opt_.incarnation);
  req.set_step(min_version);
  std::vector<KeyPayload> got =
      WithRetry(*impl_, opt_, "PullWeights", [&](grpc::ClientContext* ctx) {
        auto reader = impl_->stub->PullWeights(ctx, req);
        proto::PullHeader header;
        auto payloads = ReadResult(reader.get(), model(), &header);
        transport::ThrowIfError(reader->Finish(), "PullWeights");
        return payloads;
      });
  uint64_t bytes = 0;
  DecodeInto(got, params, &bytes);
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
