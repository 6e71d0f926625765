#pragma once
// ServerClient: the worker's view of the parameter server, whatever carries the calls. Two
// implementations: PsClient (gRPC, worker/ps_client.h) and sim::LocalClient (the server's
// ParameterStore driven in-process, sim/local_client.h; gradpress-sim runs N Trainers on it).
// The base class owns what does not depend on the carrier: the registered model and bucket
// split, a push codec per key (each with its own error feedback / momentum / RNG state), the
// pull decoders, and the codec state for checkpoints. Both carriers encode and decode with it,
// so a step's payload bytes are the same whichever runs it.
//
//   std::unique_ptr<ServerClient> c = std::make_unique<PsClient>(options);
//   c->Register(specs);  c->InitOrPull(&params);
//   StepStats s = c->PushPull(step, grads, &received);
//
// Thread-safety: one thread at a time, except concurrent PushPullBucket calls for different
// buckets (their keys' codecs are disjoint; the decoders are shared under a mutex).
#include <torch/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "proto/gradpress.pb.h"
#include "transport/fault_injection.h"
#include "worker/device_codecs.h"

namespace gradpress::worker {

using compressors::TensorSpec;

struct ClientOptions {
  std::string server = "127.0.0.1:50051";  // host:port (gRPC only)
  std::string worker_id = "worker-0";
  uint64_t incarnation = 1;         // raise on every restart of the worker process
  std::string config_hash;          // the job's ConfigHash; all workers must agree
  CodecSpec push;                   // codec (+ then, + error feedback) per key
  int64_t min_numel = 1024;         // smaller tensors travel uncompressed
  bool skip_1d = false;             // 1-D tensors travel uncompressed
  double deadline_s = 120;          // per call, seconds
  int max_retries = 10;             // UNAVAILABLE retries per call (gRPC)
  double backoff_initial_s = 0.05;  // doubled per retry, capped at backoff_max_s
  double backoff_max_s = 5;
  double momentum_correction = 0;  // > 0: compressed keys' push codecs are wrapped in DGC's
                                   // MomentumCorrection with this momentum
  double heartbeat_s = 0;          // > 0 (gRPC): a background Heartbeat this often after
                                   // Register, so long local phases do not look silent
  SecurityConfig security;         // TLS, token (gRPC; default: plaintext, no token)
  int shard = 0, shards = 1;       // sharded servers: which shard this client talks to
  uint64_t placement_hash = 0;     // ... and the placement it registers with
  int64_t catch_up_step = 0;       // > 0: Register brings a restarted shard to this step
  transport::FaultOptions faults;  // injected per attempt (gRPC; default: none)
};

struct RegisterInfo {
  int rank = 0;
  int world_size = 0;
  int64_t server_step = 0;
  bool initialized = false;
};

// What one exchange cost. network_ms = call wall time - wait_ms - server_ms.
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

// A carrier's turn on an Uplink (null: none), held from Take until Give or destruction; Take
// again after Give (a retry) takes a new turn.
class UplinkTurn {
 public:
  explicit UplinkTurn(Uplink* uplink) : uplink_(uplink) {}
  ~UplinkTurn() { Give(); }
  UplinkTurn(const UplinkTurn&) = delete;
  UplinkTurn& operator=(const UplinkTurn&) = delete;
  void Take() {
    if (uplink_ && !held_) uplink_->Acquire();
    held_ = uplink_ != nullptr;
  }
  void Give() {
    if (held_) uplink_->Release();
    held_ = false;
  }

 private:
  Uplink* uplink_;
  bool held_ = false;
};

// The server no longer knows this worker (it restarted without a checkpoint of it), or knows
// it but wants it to register again (restored from a checkpoint; dropped after
// worker_timeout_s): register again and go on.
bool LostByServer(const Error& e);

class ServerClient {
 public:
  explicit ServerClient(ClientOptions options);  // validates options.push
  virtual ~ServerClient();
  ServerClient(const ServerClient&) = delete;
  ServerClient& operator=(const ServerClient&) = delete;

  // bucket_keys: keys per bucket in model order (empty: one bucket, the whole model).
  virtual RegisterInfo Register(const std::vector<TensorSpec>& model,
                                const std::vector<int>& bucket_keys = {}) = 0;
  // Offers `params` as initial weights (the server keeps the first offer), then overwrites
  // them with the server's weights. Returns true if ours were kept.
  virtual bool InitOrPull(std::vector<torch::Tensor>* params) = 0;
  // Pushes `grads` for `step` and writes the step's result into `out` (same shapes).
  // base_step: async only, the server step of the weights the gradients come from.
  virtual StepStats PushPull(int64_t step, const std::vector<torch::Tensor>& grads,
                             std::vector<torch::Tensor>* out, int64_t base_step = 0) = 0;
  // Bucket `bucket` of a split model: pushes grads[begin, end) and writes the bucket's result
  // into (*out)[begin, end); other keys are not touched. upload (optional) is held while the
  // bucket is encoded and written, so concurrent buckets take the uplink one at a time.
  virtual StepStats PushPullBucket(int64_t step, int bucket,
                                   const std::vector<torch::Tensor>& grads,
                                   std::vector<torch::Tensor>* out, Uplink* upload = nullptr) = 0;
  // Push alone (async, or sync without waiting); then Pull for the newest result.
  virtual StepStats Push(int64_t step, const std::vector<torch::Tensor>& grads,
                         int64_t base_step = 0) = 0;
  // Sync: waits for `step`'s result (-1: the newest completed). Async: current weights.
  virtual StepStats Pull(std::vector<torch::Tensor>* out, int64_t step = -1) = 0;
  virtual int64_t Heartbeat() = 0;  // returns the server step
  // Method 6's per-epoch rule: every worker votes its score in `round`; all learn the best
  // rank (and score). The winner then PublishWeights; the others PullWeights(round + 1).
  virtual std::pair<int, double> Elect(int64_t round, double score) = 0;
  virtual void PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) = 0;
  // The server's weights into `params`, once their version is at least min_version.
  virtual void PullWeights(std::vector<torch::Tensor>* params, int64_t min_version = 0) = 0;
  virtual std::string StatsText() = 0;  // the server's counters, Prometheus text
  // Sharded servers, after a call failed with LostByServer: the shards that lost this worker
  // (restarted from older checkpoints) while the others still know it. Empty when none or
  // every shard lost it (then the job rolls back to a checkpoint, as with one server).
  virtual std::vector<int> ShardsBehind() { return {}; }
  // Sharded servers: where a shard that lost this worker takes its weights from (the model's
  // parameters, model order), so a call that met the restarted shard can bring it to the
  // job's step and go on. Unset: such a call fails and the Trainer rejoins.
  virtual void set_weights_source(std::function<std::vector<torch::Tensor>()> source) {
    (void)source;
  }
  // Pushes again the last whole-model push that completed, if it was for `step` (gRPC, sharded
  // servers: a restarted shard rebuilding a step this worker completed), ignoring the result.
  // False if no such push is kept.
  virtual bool RepushKept(int64_t step) {
    (void)step;
    return false;
  }
  // Registers again with those shards, bringing them to `step` (the step that failed, which
  // the other shards hold): each takes `params` (this worker's weights, nothing of `step`
  // applied) unless another worker's came first.
  virtual void RejoinShards(const std::vector<int>& shards, int64_t step,
                            std::vector<torch::Tensor>* params) {
    (void)shards, (void)step, (void)params;
  }

  int buckets() const;                                     // 1 without a split
  std::pair<size_t, size_t> BucketKeys(int bucket) const;  // keys [begin, end) of bucket b
  const std::vector<TensorSpec>& model() const { return model_; }
  // Checkpoints: the push codecs' state per key. LoadState needs Register (same model); a
  // state that does not fit throws InvalidArgument and changes nothing.
  virtual std::string SaveState() const;
  virtual void LoadState(std::string_view state);
  // Replaces the push codec of every compressed key (dynamic compression); fresh state.
  virtual void SetPushCodec(const CodecSpec& push);
  // Sets the density of every compressed key's sparsifier, keeping all state (DGC warm-up).
  // False if the push codec has no density.
  virtual bool SetPushDensity(double ratio);
  // exchange=weights: the lr of the server's SGD for the steps this client's next pushes
  // complete (the worker's schedule); never set = the server's train.lr.
  virtual void set_server_lr(double lr) { server_lr_ = lr; }
  const ClientOptions& options() const { return opt_; }
  void set_catch_up_step(int64_t step) { opt_.catch_up_step = step; }  // see ClientOptions
  // The dashboard: a row of this worker's metrics.jsonl for the server, sent with the next
  // push (gRPC; PushHeader.rows). At most kMaxReports wait; older ones are dropped.
  static constexpr size_t kMaxReports = 64;
  virtual void Report(const proto::WorkerRow& row);
  std::vector<proto::WorkerRow> TakeReports();  // what waits, in order; none wait after

  // For the carriers: key i's push codec; the shared decoder of a codec (thread-safe);
  // payloads of keys [begin, end) (a bucket or the whole model) decoded into out[begin, end).
  compressors::Compressor& push_codec(size_t i) { return *push_[i]; }
  const compressors::Compressor& Decoder(const std::string& codec);
  // Key i's gradient encoded by its push codec: on the GPU when g is a CUDA tensor and the
  // codec has a device kernel (device_codecs.h), else on the host.
  compressors::Payload EncodePush(size_t i, const torch::Tensor& g,
                                  const compressors::StepContext& ctx);
  // p decoded into o (any device; in place for float32 host and CUDA tensors).
  void DecodeTensor(const compressors::Payload& p, torch::Tensor* o);
  double DecodeInto(const std::vector<compressors::KeyPayload>& got,
                    std::vector<torch::Tensor>* out, uint64_t* bytes, size_t begin = 0,
                    size_t end = ~size_t{0});
  // Checks ts (the whole model) against the registered model; the shapes of keys [begin, end).
  void CheckTensors(const std::vector<torch::Tensor>& ts, const char* what, size_t begin = 0,
                    size_t end = ~size_t{0}) const;

 protected:
  // Register's carrier-independent half: the model, the bucket split, fresh push codecs.
  // Returns the buckets' key counts to send (empty: no split).
  static std::vector<std::pair<size_t, size_t>> SplitBuckets(const std::vector<TensorSpec>& model,
                                                             const std::vector<int>& bucket_keys);
  void SetModel(const std::vector<TensorSpec>& model,
                std::vector<std::pair<size_t, size_t>> buckets);
  // The keys of bucket b (-1: the whole model).
  std::pair<size_t, size_t> Keys(int bucket) const;

  ClientOptions opt_;
  std::optional<double> server_lr_;

 private:
  std::unique_ptr<compressors::Compressor> MakePushCodec(const ClientOptions& o,
                                                         const TensorSpec& s) const;
  std::vector<TensorSpec> model_;
  std::vector<std::unique_ptr<compressors::Compressor>> push_;  // per key
  DeviceCodecs device_;  // the push codecs and decoders of CUDA tensors, made on first use
  std::vector<std::pair<size_t, size_t>> buckets_;  // keys [begin, end)
  std::mutex decoders_mu_;                          // buckets decode concurrently
  std::map<std::string, std::unique_ptr<compressors::Compressor>> decoders_;
  std::mutex reports_mu_;
  std::deque<proto::WorkerRow> reports_;
};

// Lossless ("none") payloads of `params` (float32), keyed by `model`: initial or published
// weights.
std::vector<compressors::KeyPayload> WeightPayloads(const std::vector<TensorSpec>& model,
                                                    const std::vector<torch::Tensor>& params);

}  // namespace gradpress::worker
