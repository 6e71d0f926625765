#pragma once
// PsClient: the calls a worker makes to a parameter server, whatever carries them. Three
// implementations: GrpcPsClient (grpc_ps_client.h), sim::InProcessPsClient (a ParameterStore
// in this process, sim/in_process_ps_client.h) and ShardedPsClient (a composite over one
// carrier per shard, sharded_ps_client.h). The interface holds no state: a carrier encodes and
// decodes with the KeyCodecs it is given (key_codecs.h: the per-key codec state, the bucket
// split), so a step's payload bytes are the same whichever carries it.
//
//   KeyCodecs codecs(options);  GrpcPsClient c(options, &codecs);
//   c.Register(specs, bucket_keys);  c.InitOrPull(&params);
//   StepMetrics s = c.PushPull({step, bucket}, grads, &out);   // or c.PushPull(step, grads, &out)
//
// Thread-safety: one thread at a time, except concurrent PushPull calls for different buckets
// (their keys' codecs are disjoint; the decoders are shared under a mutex).
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "compressors/compressor.h"
#include "worker/client/client_options.h"
#include "worker/client/step_metrics.h"
#include "worker/client/uplink.h"

namespace gradpress::worker {

using compressors::TensorSpec;
class CudaMark;      // device_codecs.h
class DecodeChecks;  // device_codecs.h

// One push of a set of keys for a step, and the pull of its result.
struct StepCall {
  int64_t step = 0;
  int bucket = -1;           // the bucket of a split model; -1: the whole model (no split)
  int64_t base_step = 0;     // async: the server step of the weights the gradients come from
  std::optional<double> lr;  // exchange=weights: the lr of the server's SGD for the step
  // With lr: per key of the carrier's model (model order), the lr of the server's SGD for that
  // key, replacing lr (gradpress.torch's param groups); null: lr for every key.
  const std::vector<double>* key_lr = nullptr;
  bool wait = true;          // false: push only (async, or sync without waiting); no result
  Uplink* uplink = nullptr;  // held while the push is encoded and written (uplink.h)
  // CUDA gradients: where backward completed them (device_codecs.h); null: all queued work.
  const CudaMark* ready = nullptr;
  // CUDA results: device decodes add their checks here, for the caller to run before it uses
  // `out` (device_codecs.h); null: each decode waits for its own.
  DecodeChecks* decoded = nullptr;
};

class PsClient {
 public:
  virtual ~PsClient() = default;
  // bucket_keys: keys per bucket in model order (empty: one bucket, the whole model).
  // catch_up_step > 0: brings a restarted shard to this step (sharded servers).
  virtual RegisterInfo Register(const std::vector<TensorSpec>& model,
                                const std::vector<int>& bucket_keys = {},
                                int64_t catch_up_step = 0) = 0;
  // Offers `params` as initial weights (the server keeps the first offer), then overwrites
  // them with the server's weights. Returns true if ours were kept.
  virtual bool InitOrPull(std::vector<torch::Tensor>* params) = 0;
  // Offers none: waits for the initial weights another worker offers (the root rank's; each
  // call's deadline, retried as UNAVAILABLE), then writes them into `params`.
  virtual void AwaitInitWeights(std::vector<torch::Tensor>* params) = 0;
  // Pushes the call's keys of `grads` (the whole model, model order) and writes the step's
  // result into the same keys of `out`; other keys are not touched. call.wait false: out unused.
  virtual StepMetrics PushPull(const StepCall& call, const std::vector<torch::Tensor>& grads,
                               std::vector<torch::Tensor>* out) = 0;
  // Sync: waits for `step`'s result (-1: the newest completed). Async: current weights.
  virtual StepMetrics Pull(std::vector<torch::Tensor>* out, int64_t step = -1) = 0;
  virtual int64_t Heartbeat() = 0;  // returns the server step
  // Method 6's per-epoch rule: every worker votes its score in `round`; all learn the best
  // rank (and score). The winner then PublishWeights; the others PullWeights(round + 1).
  virtual std::pair<int, double> Elect(int64_t round, double score) = 0;
  virtual void PublishWeights(int64_t round, const std::vector<torch::Tensor>& params) = 0;
  // The server's weights into `params`, once their version is at least min_version.
  virtual void PullWeights(std::vector<torch::Tensor>* params, int64_t min_version = 0) = 0;
  // The momentum buffers of the server's shadow SGD (the workers' own optimizer state, sync
  // gradient methods with sync.every 1) into `buffers` (shaped as the parameters), for a
  // worker that rejoins from the server's weights. FailedPrecondition (not_initialized)
  // where the server keeps none.
  virtual void PullMomentum(std::vector<torch::Tensor>* buffers) = 0;
  virtual std::string StatsText() = 0;  // the server's counters, Prometheus text
  // A root worker's bytes to the others, under `name` (the server's Broadcast, shard 0's with
  // several): the root (root true) sends *data as the name's value of `round`; the others wait
  // (one deadline; then FailedPrecondition with reason timed_out, naming the broadcast) for
  // that round's value and get it in *data. Every worker makes the same rounds of a name.
  virtual void Broadcast(const std::string& name, int64_t round, bool root, std::string* data) = 0;

  // Shorthands of PushPull for the whole model.
  StepMetrics PushPull(int64_t step, const std::vector<torch::Tensor>& grads,
                       std::vector<torch::Tensor>* out, int64_t base_step = 0) {
    StepCall c;
    c.step = step;
    c.base_step = base_step;
    return PushPull(c, grads, out);
  }
  StepMetrics Push(int64_t step, const std::vector<torch::Tensor>& grads, int64_t base_step = 0) {
    StepCall c;
    c.step = step;
    c.base_step = base_step;
    c.wait = false;
    return PushPull(c, grads, nullptr);
  }
};

// The call's per-key lr for keys [begin, end) of the carrier's model (empty: none).
inline std::vector<double> CallKeyLr(const StepCall& call, size_t begin, size_t end) {
  if (!call.lr || call.key_lr == nullptr || call.key_lr->empty()) return {};
  GP_ENFORCE(call.key_lr->size() >= end, "StepCall: ", call.key_lr->size(),
             " per-key learning rates for keys up to ", end);
  return {call.key_lr->begin() + begin, call.key_lr->begin() + end};
}

// Detached aliases of `params` (the same storage, outside autograd): the weights as a call
// reads or writes them.
inline std::vector<torch::Tensor> DetachedAliases(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  out.reserve(params.size());
  for (const auto& p : params) out.push_back(p.detach());
  return out;
}

// A client over several servers (the sharded composite, sharded_ps_client.h): after a call
// failed with LostByServer, the servers that lost this worker while the others hold the job
// are brought back to the step, and the step runs again; nothing rolls back.
class ShardRejoin {
 public:
  virtual ~ShardRejoin() = default;
  // The shards that lost this worker (restarted from older checkpoints) while the others
  // still know it. Empty when none or every shard lost it (then the job rolls back to a
  // checkpoint, as with one server).
  virtual std::vector<int> ShardsBehind() = 0;
  // Registers again with those shards, bringing them to `step` (the step that failed, which
  // the other shards hold): each takes `params` (this worker's weights, nothing of `step`
  // applied) unless another worker's came first.
  virtual void RejoinShards(const std::vector<int>& shards, int64_t step,
                            std::vector<torch::Tensor>* params) = 0;
};

}  // namespace gradpress::worker
