#pragma once
// PsClient: the worker's side of the protocol over gRPC (a ServerClient, server_client.h, which
// owns the push codecs per key and their state). It owns the stub and counts what each step cost.
//
//   PsClient client(options);                         // options.push: the push codec
//   RegisterResult r = client.Register(specs);        // model fingerprint
//   client.InitOrPull(&params);                       // first worker's init wins; all pull it
//   StepStats s = client.PushPull(step, grads, &received);   // averaged grads or weights
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
// Tensors below min_numel elements travel uncompressed. Received tensors are written into
// the caller's tensors (any device) in model order.
// Buckets (the pipelined step, sync mode): Register(model, bucket_keys) splits the model into
// buckets of consecutive keys; PushPullBucket(step, b, ...) then exchanges bucket b alone and
// may run on several threads at once, one bucket each (the server completes each bucket on
// its own, so bucket b is pulled while bucket b+1 is pushed). The codecs stay per key.
// Thread-safety: as ServerClient's (plus the heartbeat thread it runs itself).
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/server_client.h"

namespace gradpress::worker {

struct KeyPush;  // ps_client_wire.h

class PsClient : public ServerClient {
 public:
  explicit PsClient(ClientOptions options);
  ~PsClient() override;

  RegisterInfo Register(const std::vector<TensorSpec>& model,
                        const std::vector<int>& bucket_keys = {}) override;
  bool InitOrPull(std::vector<torch::Tensor>* params) override;
  StepStats PushPull(int64_t step, const std::vector<torch::Tensor>& grads,
                     std::vector<torch::Tensor>* out, int64_t base_step = 0) override;
  StepStats PushPullBucket(int64_t step, int bucket, const std::vector<torch::Tensor>& grads,
                           std::vector<torch::Tensor>* out, Uplink* upload = nullptr) override;
  StepStats Push(int64_t step, const std::vector<torch::Tensor>& grads,
                 int64_t base_step = 0) override;
  StepStats Pull(std::vector<torch::Tensor>* out, int64_t step = -1) override;
  int64_t Heartbeat() override;
  std::pair<int, double> Elect(int64_t round, double score) override;
  void PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) override;
  void PullWeights(std::vector<torch::Tensor>* params, int64_t min_version = 0) override;
  std::string StatsText() override;
  bool RepushKept(int64_t step) override;

  // Since construction: attempts retried (all calls), and faults injected into them.
  uint64_t retries() const;
  uint64_t faults_injected() const;
  struct Impl;  // stub, channel, heartbeats, faults (ps_client_internal.h)

 private:
  bool UploadWeights(bool publish, int64_t round, const std::vector<torch::Tensor>& params);
  // Pushes `pushes` for `step` and reads the result into (*out)[begin, end) (the bucket's keys).
  StepStats Send(int64_t step, int64_t base_step, int bucket, const std::vector<KeyPush>& pushes,
                 std::vector<torch::Tensor>* out, UplinkTurn* turn);
  StepStats Exchange(int64_t step, int64_t base_step, int bucket,
                     const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>* out,
                     Uplink* upload = nullptr);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradpress::worker
