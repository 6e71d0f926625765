#pragma once
// GrpcPsClient: the PsClient (ps_client.h) that carries the calls over gRPC to a
// gradpress-server. It encodes and decodes with a KeyCodecs (key_codecs.h) it is lent, or owns
// one (the one-argument constructor), and counts what each call cost.
//
//   GrpcPsClient client(options);                     // options.push: the push codec
//   client.Register(specs);                           // model fingerprint
//   client.InitOrPull(&params);                       // first worker's init wins; all pull it
//   StepMetrics s = client.PushPull(step, grads, &received);   // averaged grads or weights
//
// Every call has a deadline (deadline_s); UNAVAILABLE (server restarting, barrier timeout)
// is retried with capped exponential backoff, which is safe because the server applies a
// (worker, incarnation, step) once and answers a repeat as it answered the first. Other
// errors throw the matching gradpress::Error with the server's message (which names the key
// and the reason); after max_retries the last Unavailable is thrown, naming the call, the
// attempts and the server (with a hint when TLS is on).
// Security (transport/security.h): the channel uses options.security's TLS settings and every
// call, heartbeats included, carries "authorization: Bearer <token>" when a token is set.
// Faults (transport/fault_injection.h): options.faults are drawn per attempt of every call
// except the background heartbeats; retries() and faults_injected() count them.
// Pushes are framed straight from tensor memory (lossless keys) or codec payloads; lossless
// results are copied from the received slices into the caller's tensors (grpc_wire.h). A push
// and a heartbeat carry the dashboard's rows waiting in options.rows.
// Thread-safety: as PsClient's (plus the heartbeat thread it runs itself).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/client/key_codecs.h"
#include "worker/client/ps_client.h"

namespace gradpress::worker {

class GrpcPsClient : public PsClient {
 public:
  explicit GrpcPsClient(ClientOptions options);  // owns its codecs
  GrpcPsClient(ClientOptions options, KeyCodecs* codecs);
  ~GrpcPsClient() override;

  RegisterInfo Register(const std::vector<TensorSpec>& model,
                        const std::vector<int>& bucket_keys = {},
                        int64_t catch_up_step = 0) override;
  bool InitOrPull(std::vector<torch::Tensor>* params) override;
  void AwaitInitWeights(std::vector<torch::Tensor>* params) override;
  using PsClient::PushPull;
  StepMetrics PushPull(const StepCall& call, const std::vector<torch::Tensor>& grads,
                       std::vector<torch::Tensor>* out) override;
  StepMetrics Pull(std::vector<torch::Tensor>* out, int64_t step = -1) override;
  int64_t Heartbeat() override;
  std::pair<int, double> Elect(int64_t round, double score) override;
  void PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) override;
  void PullWeights(std::vector<torch::Tensor>* params, int64_t min_version = 0) override;
  void PullMomentum(std::vector<torch::Tensor>* buffers) override;
  std::string StatsText() override;
  void Broadcast(const std::string& name, int64_t round, bool root, std::string* data) override;

  KeyCodecs& codecs() { return *codecs_; }
  const ClientOptions& options() const { return opt_; }
  // Since construction: attempts retried (all calls), and faults injected into them.
  uint64_t retries() const;
  uint64_t faults_injected() const;
  struct Impl;  // stub, channel, heartbeats, faults (grpc_calls.h)

 private:
  bool UploadWeights(bool publish, int64_t round, const std::vector<torch::Tensor>& params);
  // PullWeights' call: the weights, or (momentum) the server's shadow momentum buffers.
  void ReadWeights(std::vector<torch::Tensor>* params, int64_t min_version, bool wait_init,
                   bool momentum = false);
  void StartHeartbeats();
  ClientOptions opt_;
  std::unique_ptr<KeyCodecs> owned_codecs_;
  KeyCodecs* codecs_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradpress::worker
