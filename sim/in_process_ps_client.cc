// InProcessPsClient: a PsClient over an in-process ParameterStore (in_process_ps_client.h).
#include "sim/in_process_ps_client.h"

#include <chrono>

#include "common/error.h"
#include "common/timer.h"

namespace gradpress::sim {

using compressors::KeyPayload;
using worker::StepMetrics;

InProcessPsClient::InProcessPsClient(worker::ClientOptions options, worker::KeyCodecs* codecs,
                                     server::ParameterStore* store)
    : opt_(std::move(options)),
      codecs_(codecs),
      store_(store),
      id_{opt_.worker_id, opt_.incarnation} {
  GP_ENFORCE(codecs_ != nullptr && store_ != nullptr, "InProcessPsClient needs codecs and a store");
}

server::Clock::time_point InProcessPsClient::Deadline() const {
  return server::Clock::now() + std::chrono::duration_cast<server::Clock::duration>(
                                    std::chrono::duration<double>(opt_.deadline_s));
}

worker::RegisterInfo InProcessPsClient::Register(const std::vector<worker::TensorSpec>& model,
                                                 const std::vector<int>& bucket_keys,
                                                 int64_t catch_up_step) {
  const server::RegisterResult r = store_->Register(
      id_, model, opt_.config_hash, worker::KeyCodecs::CheckSplit(model.size(), bucket_keys),
      {opt_.shard, opt_.shards, opt_.placement_hash, catch_up_step});
  codecs_->SetModel(model, bucket_keys);
  return {r.rank, r.world_size, r.server_step, r.initialized};
}

bool InProcessPsClient::InitOrPull(std::vector<torch::Tensor>* params) {
  codecs_->CheckTensors(*params, "InitWeights");
  const bool accepted = store_->InitWeights(id_, worker::WeightPayloads(codecs_->model(), *params));
  PullWeights(params, 0);
  return accepted;
}

void InProcessPsClient::Receive(const server::StepResult& r, std::vector<torch::Tensor>* out,
                                size_t begin, size_t end, StepMetrics* st,
                                worker::DecodeChecks* later) {
  st->server_step = r.step;
  st->contributors = r.contributors;
  uint64_t bytes = 0;
  st->decode_ms += codecs_->DecodeAll(r.payloads, out, &bytes, begin, end, later);
  st->bytes_down += bytes;
  store_->CountBytesOut(bytes);
}

StepMetrics InProcessPsClient::PushPull(const worker::StepCall& call,
                                        const std::vector<torch::Tensor>& grads,
                                        std::vector<torch::Tensor>* out) {
  const worker::KeyCodecs::CallKeys keys = codecs_->Keys(call.bucket);
  if (call.wait) codecs_->CheckTensors(*out, "PushPull output", keys.begin, keys.end);
  StepMetrics st;
  worker::UplinkTurn turn(call.uplink);  // held while encoding (there is no write to wait for)
  turn.Take();
  const std::vector<worker::KeyPush> pushes =
      codecs_->Encode(call.step, grads, keys.begin, keys.end, &st, call.ready);
  std::vector<KeyPayload> payloads;
  for (const worker::KeyPush& p : pushes) payloads.push_back(worker::ToPayload(p));
  turn.Give();
  const server::PushPullResult r =
      store_->PushPull(id_, call.step, call.base_step, std::move(payloads), Deadline(), call.wait,
                       call.lr, keys.bucket, worker::CallKeyLr(call, keys.begin, keys.end));
  st.duplicate = r.duplicate;
  if (!call.wait) {
    st.server_ms = r.apply_ms;
    st.server_step = store_->step();
    return st;
  }
  GP_ENFORCE(r.result != nullptr, "PushPull: the store sent no result of step ", call.step);
  st.wait_ms = r.wait_ms;
  st.server_ms = r.apply_ms + r.result->server_ms;
  Receive(*r.result, out, keys.begin, keys.end, &st, call.decoded);
  return st;
}

StepMetrics InProcessPsClient::Pull(std::vector<torch::Tensor>* out, int64_t step) {
  codecs_->CheckTensors(*out, "Pull");
  StepMetrics st;
  Timer t;
  const auto r = store_->Pull(id_, step, Deadline());
  GP_ENFORCE(r != nullptr, "Pull: the store has no result of step ", step);
  st.server_ms = r->server_ms;
  st.wait_ms = std::max(0.0, t.ElapsedMs() - r->server_ms);
  Receive(*r, out, 0, codecs_->model().size(), &st);
  return st;
}

int64_t InProcessPsClient::Heartbeat() { return store_->Heartbeat(id_); }

std::pair<int, double> InProcessPsClient::Elect(int64_t round, double score) {
  return store_->Elect(id_, round, score, Deadline());
}

void InProcessPsClient::PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) {
  codecs_->CheckTensors(params, "PublishWeights");
  store_->PublishWeights(id_, round, worker::WeightPayloads(codecs_->model(), params));
}

void InProcessPsClient::PullWeights(std::vector<torch::Tensor>* params, int64_t min_version) {
  codecs_->CheckTensors(*params, "PullWeights");
  const auto r = store_->Weights(id_, min_version, Deadline());
  GP_ENFORCE(r != nullptr, "PullWeights: the store has no weights");
  uint64_t bytes = 0;
  codecs_->DecodeAll(r->payloads, params, &bytes, 0, codecs_->model().size());
}

void InProcessPsClient::PullMomentum(std::vector<torch::Tensor>* buffers) {
  codecs_->CheckTensors(*buffers, "PullMomentum");
  const auto r = store_->ShadowMomentum(id_);
  uint64_t bytes = 0;
  codecs_->DecodeAll(r->payloads, buffers, &bytes, 0, codecs_->model().size());
}

std::string InProcessPsClient::StatsText() { return store_->Stats().Prometheus(); }

void InProcessPsClient::AwaitInitWeights(std::vector<torch::Tensor>* params) {
  codecs_->CheckTensors(*params, "PullWeights");
  const auto r = store_->Weights(id_, 0, Deadline(), /*wait_init=*/true);
  uint64_t bytes = 0;
  codecs_->DecodeAll(r->payloads, params, &bytes, 0, codecs_->model().size());
}

void InProcessPsClient::Broadcast(const std::string& name, int64_t round, bool root,
                                  std::string* data) {
  if (root) {
    store_->BroadcastPut(id_, name, round, data->size(), 0, *data);
    return;
  }
  *data = *store_->BroadcastGet(id_, name, round, Deadline());
}

}  // namespace gradpress::sim
