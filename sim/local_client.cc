// LocalClient: ServerClient over an in-process ParameterStore (local_client.h).
#include "sim/local_client.h"

#include <chrono>

#include "common/error.h"
#include "common/timer.h"

namespace gradpress::sim {

using compressors::KeyPayload;
using worker::StepStats;

LocalClient::LocalClient(worker::ClientOptions options, server::ParameterStore* store)
    : ServerClient(std::move(options)), store_(store), id_{opt_.worker_id, opt_.incarnation} {
  GP_ENFORCE(store_ != nullptr, "LocalClient needs a store");
}

server::Clock::time_point LocalClient::Deadline() const {
  return server::Clock::now() + std::chrono::duration_cast<server::Clock::duration>(
                                    std::chrono::duration<double>(opt_.deadline_s));
}

worker::RegisterInfo LocalClient::Register(const std::vector<worker::TensorSpec>& model,
                                           const std::vector<int>& bucket_keys) {
  auto buckets = SplitBuckets(model, bucket_keys);
  const server::RegisterResult r = store_->Register(
      id_, model, opt_.config_hash, buckets.size() > 1 ? bucket_keys : std::vector<int>{},
      {opt_.shard, opt_.shards, opt_.placement_hash, opt_.catch_up_step});
  SetModel(model, std::move(buckets));
  return {r.rank, r.world_size, r.server_step, r.initialized};
}

bool LocalClient::InitOrPull(std::vector<torch::Tensor>* params) {
  CheckTensors(*params, "InitWeights");
  const bool accepted = store_->InitWeights(id_, worker::WeightPayloads(model(), *params));
  PullWeights(params, 0);
  return accepted;
}

std::vector<KeyPayload> LocalClient::Encode(int64_t step, const std::vector<torch::Tensor>& grads,
                                            size_t begin, size_t end, StepStats* st) {
  CheckTensors(grads, "push", begin, end);
  Timer t;
  std::vector<KeyPayload> payloads(end - begin);
  for (size_t i = begin; i < end; ++i) {
    KeyPayload& kp = payloads[i - begin];
    kp.key = model()[i].key;
    kp.payload = EncodePush(i, grads[i], {kp.key, step});
    st->bytes_up += kp.payload.bytes.size();
  }
  st->encode_ms += t.ElapsedMs();
  return payloads;
}

void LocalClient::Receive(const server::StepResult& r, std::vector<torch::Tensor>* out,
                          size_t begin, size_t end, StepStats* st) {
  st->server_step = r.step;
  st->contributors = r.contributors;
  uint64_t bytes = 0;
  st->decode_ms += DecodeInto(r.payloads, out, &bytes, begin, end);
  st->bytes_down += bytes;
  store_->CountBytesOut(bytes);
}

StepStats LocalClient::Exchange(int64_t step, int64_t base_step, int bucket,
                                const std::vector<torch::Tensor>& grads,
                                std::vector<torch::Tensor>* out, worker::Uplink* upload) {
  const auto [begin, end] = Keys(bucket);
  CheckTensors(*out, "PushPull output", begin, end);
  StepStats st;
  worker::UplinkTurn turn(upload);  // held while encoding (there is no write to wait for)
  turn.Take();
  std::vector<KeyPayload> payloads = Encode(step, grads, begin, end, &st);
  turn.Give();
  const server::PushPullResult r = store_->PushPull(id_, step, base_step, std::move(payloads),
                                                    Deadline(), /*wait=*/true, server_lr_, bucket);
  GP_ENFORCE(r.result != nullptr, "PushPull: the store sent no result of step ", step);
  st.wait_ms = r.wait_ms;
  st.server_ms = r.apply_ms + r.result->server_ms;
  st.duplicate = r.duplicate;
  Receive(*r.result, out, begin, end, &st);
  return st;
}

StepStats LocalClient::PushPull(int64_t step, const std::vector<torch::Tensor>& grads,
                                std::vector<torch::Tensor>* out, int64_t base_step) {
  GP_ENFORCE(buckets() <= 1, "PushPull: the model is split into ", buckets(),
             " buckets: exchange them with PushPullBucket");
  return Exchange(step, base_step, -1, grads, out, nullptr);
}

StepStats LocalClient::PushPullBucket(int64_t step, int bucket,
                                      const std::vector<torch::Tensor>& grads,
                                      std::vector<torch::Tensor>* out, worker::Uplink* upload) {
  BucketKeys(bucket);  // checks the index
  return Exchange(step, 0, buckets() > 1 ? bucket : -1, grads, out, upload);
}

StepStats LocalClient::Push(int64_t step, const std::vector<torch::Tensor>& grads,
                            int64_t base_step) {
  StepStats st;
  std::vector<KeyPayload> payloads = Encode(step, grads, 0, model().size(), &st);
  const server::PushPullResult r = store_->PushPull(id_, step, base_step, std::move(payloads),
                                                    Deadline(), /*wait=*/false, server_lr_);
  st.server_ms = r.apply_ms;
  st.duplicate = r.duplicate;
  st.server_step = store_->step();
  return st;
}

StepStats LocalClient::Pull(std::vector<torch::Tensor>* out, int64_t step) {
  CheckTensors(*out, "Pull");
  StepStats st;
  Timer t;
  const auto r = store_->Pull(id_, step, Deadline());
  GP_ENFORCE(r != nullptr, "Pull: the store has no result of step ", step);
  st.server_ms = r->server_ms;
  st.wait_ms = std::max(0.0, t.ElapsedMs() - r->server_ms);
  Receive(*r, out, 0, model().size(), &st);
  return st;
}

int64_t LocalClient::Heartbeat() { return store_->Heartbeat(id_); }

std::pair<int, double> LocalClient::Elect(int64_t round, double score) {
  return store_->Elect(id_, round, score, Deadline());
}

void LocalClient::PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) {
  CheckTensors(params, "PublishWeights");
  store_->PublishWeights(id_, round, worker::WeightPayloads(model(), params));
}

void LocalClient::PullWeights(std::vector<torch::Tensor>* params, int64_t min_version) {
  CheckTensors(*params, "PullWeights");
  const auto r = store_->Weights(id_, min_version, Deadline());
  GP_ENFORCE(r != nullptr, "PullWeights: the store has no weights");
  uint64_t bytes = 0;
  DecodeInto(r->payloads, params, &bytes);
}

std::string LocalClient::StatsText() { return store_->Stats().Prometheus(); }

}  // namespace gradpress::sim
