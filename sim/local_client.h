#pragma once
// LocalClient: the worker's client (worker::ServerClient) over a server::ParameterStore in the
// same process: no gRPC, no serialisation, no network. gradpress-sim runs N worker::Trainers on
// LocalClients over one store, so the simulated job is the real job's code path end to end
// (trainer, exchange, codecs, the store's aggregation, server SGD, pull codecs) less the wire.
//
//   server::ParameterStore store(server::StoreOptionsFromConfig(c));
//   LocalClient client(options, &store);      // options as PsClient's; server/security unused
//   client.Register(specs);  client.InitOrPull(&params);
//   StepStats s = client.PushPull(step, grads, &received);
//
// Payloads are encoded and decoded by the same per-key codecs as PsClient's (ServerClient), so
// bytes_up/bytes_down are the bytes the real job sends. The store's errors reach the caller as
// they are (the same gradpress::Error types PsClient maps gRPC statuses to); nothing is retried
// (nothing in-process is transient). network_ms is 0; wait_ms is the barrier wait; server_ms
// the store's apply + finalize, as a PullHeader reports them.
// Thread-safety: as ServerClient's; the store is shared with the other workers' clients.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "server/parameter_store.h"
#include "worker/server_client.h"

namespace gradpress::sim {

class LocalClient : public worker::ServerClient {
 public:
  LocalClient(worker::ClientOptions options, server::ParameterStore* store);

  worker::RegisterInfo Register(const std::vector<worker::TensorSpec>& model,
                                const std::vector<int>& bucket_keys = {}) override;
  bool InitOrPull(std::vector<torch::Tensor>* params) override;
  worker::StepStats PushPull(int64_t step, const std::vector<torch::Tensor>& grads,
                             std::vector<torch::Tensor>* out, int64_t base_step = 0) override;
  worker::StepStats PushPullBucket(int64_t step, int bucket,
                                   const std::vector<torch::Tensor>& grads,
                                   std::vector<torch::Tensor>* out,
                                   worker::Uplink* upload = nullptr) override;
  worker::StepStats Push(int64_t step, const std::vector<torch::Tensor>& grads,
                         int64_t base_step = 0) override;
  worker::StepStats Pull(std::vector<torch::Tensor>* out, int64_t step = -1) override;
  int64_t Heartbeat() override;
  std::pair<int, double> Elect(int64_t round, double score) override;
  void PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) override;
  void PullWeights(std::vector<torch::Tensor>* params, int64_t min_version = 0) override;
  std::string StatsText() override;

 private:
  server::Clock::time_point Deadline() const;
  // Encodes keys [begin, end) of grads with their push codecs; adds bytes and encode ms.
  std::vector<compressors::KeyPayload> Encode(int64_t step, const std::vector<torch::Tensor>& grads,
                                              size_t begin, size_t end, worker::StepStats* st);
  worker::StepStats Exchange(int64_t step, int64_t base_step, int bucket,
                             const std::vector<torch::Tensor>& grads,
                             std::vector<torch::Tensor>* out, worker::Uplink* upload);
  // Decodes a result of keys [begin, end) into out; counts bytes_down and decode ms.
  void Receive(const server::StepResult& r, std::vector<torch::Tensor>* out, size_t begin,
               size_t end, worker::StepStats* st);

  server::ParameterStore* store_;
  server::WorkerId id_;
};

}  // namespace gradpress::sim
