#pragma once
// InProcessPsClient: the worker's client (worker::PsClient) over a server::ParameterStore in the
// same process: no gRPC, no serialisation, no network. gradpress-sim runs N worker::Trainers on
// these over one store, so the simulated job is the real job's code path end to end (trainer,
// exchange, codecs, the store's aggregation, server SGD, pull codecs) less the wire.
//
//   server::ParameterStore store(server::StoreOptionsFromConfig(c));
//   InProcessPsClient client(options, &codecs, &store);  // options as GrpcPsClient's
//   client.Register(specs);  client.InitOrPull(&params);
//   StepMetrics s = client.PushPull(step, grads, &received);
//
// Payloads are encoded and decoded by the same KeyCodecs as GrpcPsClient's, so bytes_up and
// bytes_down are the bytes the real job sends. The store's errors reach the caller as they are
// (the same gradpress::Error types GrpcPsClient maps gRPC statuses to); nothing is retried
// (nothing in-process is transient). network_ms is 0; wait_ms is the barrier wait; server_ms
// the store's apply + finalize, as a PullHeader reports them. The dashboard's rows are not sent.
// Thread-safety: as PsClient's; the store is shared with the other workers' clients.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/parameter_store.h"
#include "worker/client/key_codecs.h"
#include "worker/client/ps_client.h"

namespace gradpress::sim {

class InProcessPsClient : public worker::PsClient {
 public:
  InProcessPsClient(worker::ClientOptions options, worker::KeyCodecs* codecs,
                    server::ParameterStore* store);

  worker::RegisterInfo Register(const std::vector<worker::TensorSpec>& model,
                                const std::vector<int>& bucket_keys = {},
                                int64_t catch_up_step = 0) override;
  bool InitOrPull(std::vector<torch::Tensor>* params) override;
  void AwaitInitWeights(std::vector<torch::Tensor>* params) override;
  using PsClient::PushPull;
  worker::StepMetrics PushPull(const worker::StepCall& call,
                               const std::vector<torch::Tensor>& grads,
                               std::vector<torch::Tensor>* out) override;
  worker::StepMetrics Pull(std::vector<torch::Tensor>* out, int64_t step = -1) override;
  int64_t Heartbeat() override;
  std::pair<int, double> Elect(int64_t round, double score) override;
  void PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) override;
  void PullWeights(std::vector<torch::Tensor>* params, int64_t min_version = 0) override;
  void PullMomentum(std::vector<torch::Tensor>* buffers) override;
  std::string StatsText() override;
  void Broadcast(const std::string& name, int64_t round, bool root, std::string* data) override;

 private:
  server::Clock::time_point Deadline() const;
  // Decodes a result of keys [begin, end) into out; counts bytes_down and decode ms. later:
  // where device decodes leave their checks (StepCall::decoded).
  void Receive(const server::StepResult& r, std::vector<torch::Tensor>* out, size_t begin,
               size_t end, worker::StepMetrics* st, worker::DecodeChecks* later = nullptr);

  worker::ClientOptions opt_;
  worker::KeyCodecs* codecs_;
  server::ParameterStore* store_;
  server::WorkerId id_;
};

}  // namespace gradpress::sim
