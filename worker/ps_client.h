#pragma once
// PsClient: the worker's side of the protocol. It owns the gRPC stub, a push codec per key
// (each with its own error feedback state), and counts what each step cost.
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
// Thread-safety: one thread at a time per client, except concurrent PushPullBucket calls for
// different buckets (and the heartbeat thread it runs itself).
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/config.h"
#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "transport/fault_injection.h"

namespace gradpress::worker {

using compressors::TensorSpec;

struct ClientOptions {
  std::string server = "127.0.0.1:50051";  // host:port
  std::string worker_id = "worker-0";
  uint64_t incarnation = 1;            // raise on every restart of the worker process
  std::string config_hash;             // the job's ConfigHash; all workers must agree
  compressors::CompressorConfig push;  // codec (+ then, + error feedback) per key
  int64_t min_numel = 1024;            // smaller tensors travel uncompressed
  bool skip_1d = false;                // 1-D tensors travel uncompressed
  double deadline_s = 120;             // per RPC, seconds
  int max_retries = 10;                // UNAVAILABLE retries per call
  double backoff_initial_s = 0.05;     // doubled per retry, capped at backoff_max_s
  double backoff_max_s = 5;
  double momentum_correction = 0;  // > 0: compressed keys' push codecs are wrapped in DGC's
                                   // MomentumCorrection with this momentum
  double heartbeat_s = 0;          // > 0: a background Heartbeat this often after Register,
                                   // so long local phases (evaluation) do not look silent
  SecurityConfig security;         // TLS, token (default: plaintext, no token)
  transport::FaultOptions faults;  // injected per attempt (default: none)
};

struct RegisterInfo {
  int rank = 0;
  int world_size = 0;
  int64_t server_step = 0;
  bool initialized = false;
};

// What one exchange cost. network_ms = RPC wall time - wait_ms - server_ms.
struct StepStats {
  uint64_t bytes_up = 0;    // payload bytes pushed
  uint64_t bytes_down = 0;  // payload bytes received
  double encode_ms = 0;
  double network_ms = 0;
  double decode_ms = 0;
  double wait_ms = 0;       // barrier wait on the server
  double server_ms = 0;     // server decode + aggregate + encode
  int64_t server_step = 0;  // step of the received result
  int contributors = 0;
  bool duplicate = false;
  int retries = 0;  // attempts of this call that failed UNAVAILABLE and were retried
};

// A turn on the uplink (PushPullBucket): Acquire before encoding and writing, Release once the
// push is written (also when the call fails).
class Uplink {
 public:
  virtual ~Uplink() = default;
  virtual void Acquire() = 0;
  virtual void Release() = 0;
};

class PsClient {
 public:
  explicit PsClient(ClientOptions options);
  ~PsClient();

  // bucket_keys: keys per bucket in model order (empty: one bucket, the whole model).
  RegisterInfo Register(const std::vector<TensorSpec>& model,
                        const std::vector<int>& bucket_keys = {});
  int buckets() const;  // 1 without a split
  // The keys [begin, end) of bucket b.
  std::pair<size_t, size_t> BucketKeys(int bucket) const;
  // Offers `params` as initial weights (the server keeps the first offer), then overwrites
  // them with the server's weights. Returns true if ours were kept.
  bool InitOrPull(std::vector<torch::Tensor>* params);
  // Pushes `grads` for `step` and writes the step's result into `out` (same shapes).
  // base_step: async only, the server step of the weights the gradients come from.
  StepStats PushPull(int64_t step, const std::vector<torch::Tensor>& grads,
                     std::vector<torch::Tensor>* out, int64_t base_step = 0);
  // Bucket `bucket` of a split model: pushes grads[begin, end) of it and writes the bucket's
  // result into (*out)[begin, end); grads and out hold the whole model (other keys are not
  // touched). Safe to call concurrently for different buckets. upload (optional) is held
  // while the bucket is encoded and written, so that concurrent buckets take the uplink one
  // after the other (each at the full rate) while earlier ones are being pulled.
  StepStats PushPullBucket(int64_t step, int bucket, const std::vector<torch::Tensor>& grads,
                           std::vector<torch::Tensor>* out, Uplink* upload = nullptr);
  // Push alone (async, or sync without waiting); then Pull for the newest result.
  StepStats Push(int64_t step, const std::vector<torch::Tensor>& grads, int64_t base_step = 0);
  // Sync: waits for `step`'s result (-1: the newest completed). Async: current weights.
  StepStats Pull(std::vector<torch::Tensor>* out, int64_t step = -1);
  int64_t Heartbeat();
  // Method 6's per-epoch rule: every worker votes its score in `round`; all learn the best
  // rank (and score). The winner then PublishWeights; the others PullWeights(round + 1).
  std::pair<int, double> Elect(int64_t round, double score);
  void PublishWeights(int64_t round, const std::vector<torch::Tensor>& params);
  // The server's weights into `params`, once their version is at least min_version.
  void PullWeights(std::vector<torch::Tensor>* params, int64_t min_version = 0);
  // The server's counters in Prometheus text format.
  std::string StatsText();
  // Checkpoints: the push codecs' state (error-feedback residuals, RNG streams) per key.
  // LoadState needs Register first (same model); a state that does not fit throws
  // InvalidArgument and changes nothing.
  std::string SaveState() const;
  void LoadState(std::string_view state);
  // Replaces the push codec of every compressed key (dynamic compression); the new codecs
  // start with fresh state. Requires Register.
  void SetPushCodec(const compressors::CompressorConfig& push);
  // Sets the density of every compressed key's sparsifier, keeping all state (DGC warm-up).
  // False if the push codec has no density.
  bool SetPushDensity(double ratio);

  // exchange=weights: the learning rate the server's SGD uses for the steps this client's
  // next pushes complete (the worker's schedule); never set = the server's train.lr.
  void set_server_lr(double lr) { server_lr_ = lr; }

  const ClientOptions& options() const { return opt_; }
  // Since construction: attempts retried (all calls), and faults injected into them.
  uint64_t retries() const;
  uint64_t faults_injected() const;
  struct Impl;  // stub, per-key codecs, decoders (ps_client.cc)

 private:
  bool UploadWeights(bool publish, int64_t round, const std::vector<torch::Tensor>& params);
  StepStats Exchange(int64_t step, int64_t base_step, int bucket,
                     const std::vector<torch::Tensor>& grads, std::vector<torch::Tensor>* out,
                     Uplink* upload = nullptr);
  ClientOptions opt_;
  std::optional<double> server_lr_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gradpress::worker
