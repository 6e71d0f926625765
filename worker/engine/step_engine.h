#pragma once
// StepEngine: a worker's training step from backward's gradients to the updated model, for
// both front ends -- the C++ Trainer (trainer.h) and gradpress.torch's WorkerSession
// (python/src/worker_session.h) are loops over it, as DDP is a loop over its Reducer. It owns
// the client (client_factory.h) and the method's Exchange (exchange.h: buckets from backward's
// hooks, the serial step, method 6's periodic sync), and the job's step rules, so that
// neither front end decides a feature:
//   - the connect sequence: compress.auto's choice before registering, Register, the first
//     worker's weights win (or the root rank's, when one is named: the others offer none and
//     wait for them; or a restarted worker keeps its own of the server's step), the local
//     step the server's step means;
//   - the step's lr for the server's SGD or shadow weights, one for the model or one per key
//     (gradpress.torch's param groups), added to every call of the step;
//   - clipping (compress.clip_norm: DGC's local clipping of the worker's gradients to
//     clip_norm / sqrt(workers) before they are pushed);
//   - the push codec's policy: compress.auto's per-key codecs, the dynamic ladder
//     (compress.dynamic: a codec per epoch from test accuracy and training loss,
//     compression_schedule.h), DGC's sparsity warm-up (compress.warmup_epochs: a density per
//     epoch); each change recorded through options.log (the loop's run files).
//
//   StepEngine e({&config, rank, workers, &params, names, optimizer, &files}, client);
//   e.Connect();
//   per epoch: e.StartEpoch(epoch);
//     per step: forward; e.Settle(&done) (cross-barrier); e.BeginStep(lr); backward;
//               e.FinishStep(&m);    // clip, exchange, update (or averaged gradients in p.grad)
//     acc = e.EndEpoch(epoch, evaluate, probe_loss, /*adapt=*/true, &m);
//
// Thread-safety: the training thread (the pipelined exchange runs threads of its own).
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "common/codec_spec.h"
#include "common/config.h"
#include "worker/client/client_factory.h"
#include "worker/client/step_metrics.h"
#include "worker/engine/compression_schedule.h"
#include "worker/engine/exchange.h"

namespace gradpress::worker {

struct EngineOptions {
  const Config* config = nullptr;  // outlives the engine
  int rank = 0;
  int workers = 1;
  std::vector<torch::Tensor>* params = nullptr;  // the model's parameters (leaves), outlive it
  std::vector<std::string> names;                // the server's key names, model order
  // The local optimizer, or null: exchange=weights, or the caller steps its own (Python).
  torch::optim::Optimizer* optimizer = nullptr;
  PolicyLog* log = nullptr;  // codec changes and densities are recorded here (may be null)
  // The pipelined step's hooks: registered by the engine on the parameters (true), or the
  // front end's own, feeding Gradient (gradpress.torch's: they carry the step's lr).
  bool register_hooks = true;
};

// What Connect found.
struct Connection {
  RegisterInfo info;
  bool ours = false;      // this worker's initial weights were kept (the first offer)
  bool kept_own = false;  // a restarted worker kept the weights of its own checkpoint
};

class StepEngine {
 public:
  StepEngine(EngineOptions options, WorkerClient client);
  ~StepEngine();
  StepEngine(const StepEngine&) = delete;
  StepEngine& operator=(const StepEngine&) = delete;

  // Registers and adopts the server's weights. restored_step: the step of a checkpoint the
  // caller has loaded into the parameters; at the server's step (past 0) with the workers'
  // weights on the server (gradient methods) they are kept, as a rejoin of that step.
  // root_rank: only the worker of that rank (options' rank) offers its weights, the others
  // wait for them (InvalidArgument outside [0, workers)); none: the first offer wins.
  Connection Connect(std::optional<int64_t> restored_step = std::nullopt,
                     std::optional<int> root_rank = std::nullopt);
  // Before backward: the step's lr (the local optimizer's; the server's SGD or shadow
  // weights' when it follows it) and, pipelined, the buckets armed for backward's hooks.
  // key_lr: per key (model order) the lr of the server's SGD for it, replacing lr (param
  // groups); empty: lr for every key.
  void BeginStep(double lr, std::vector<double> key_lr = {});
  // A front end's hook (register_hooks false and feeds()): key's gradient, during backward.
  void Gradient(size_t key, const torch::Tensor& grad);
  // Whether backward's gradients are to be fed to Gradient (the pipelined step without
  // compress.clip_norm, whose buckets go out once every gradient is clipped).
  bool feeds() const { return feed_ != nullptr && opt_.config->compress.clip_norm <= 0; }
  // Before the local optimizer steps on the worker's own gradients (method 6 under a front
  // end whose optimizer is its own): zeros for a parameter without a gradient, clipping.
  // FinishStep does it when it was not done for the step.
  void PrepareGradients(StepMetrics* m);
  // After backward: p.grad holds this worker's gradients (none: zeros). Clips, exchanges and
  // updates the parameters (no local optimizer: leaves the averaged gradients in p.grad);
  // merges the step's figures into *m (exposed_comm_ms for the serial step, local work in
  // compute_ms). Advances step().
  void FinishStep(StepMetrics* m);
  // Cross-barrier (exchange.h): the pending step's results of `layer`'s parameters, in its
  // gate in forward; Settle completes the pending step (false if none was). A failed exchange
  // is rethrown, and nothing is pending after.
  void GateLayer(const torch::nn::Module& layer);
  bool Settle(SettledStep* done);
  // The start of an epoch (also a resumed one): DGC's warm-up density for it.
  void StartEpoch(int64_t epoch);
  // The end of an epoch: the accuracy to report (method 6 first applies its epoch rule), and,
  // with adapt, the dynamic ladder's decision for the next epoch from it and probe_loss()
  // (the training loss on the same images on every worker, so all decide alike).
  double EndEpoch(int64_t epoch, const std::function<double()>& evaluate,
                  const std::function<double()>& probe_loss, bool adapt, StepMetrics* m);

  // Resume and rejoin: go on from the server's step with the current parameters.
  void Reset(int64_t server_step);
  // A worker whose own state is older than the server's step (server.shadow_weights) goes
  // on from the server's copy of the workers' weights and, where the server's shadow SGD is
  // the local optimizer's (torch SGD with momentum, sync.every 1, no momentum correction),
  // its momentum buffers too, so the restarted replica holds what the others hold; then
  // Reset(server_step). Without the server's momentum (none kept yet) it keeps its own.
  void AdoptServerWeights(int64_t server_step);
  // A checkpoint's counters (its tensors were read into State().tensors in place).
  void Restore(int64_t step, int64_t server_step, int64_t since_exchange);
  ExchangeState State() { return exchange_->State(step_); }
  // compress.auto's codecs per key (empty: not chosen); SetAutoCodecs installs a checkpoint's.
  const std::vector<CodecSpec>& auto_codecs() const { return auto_push_; }
  void SetAutoCodecs(std::vector<CodecSpec> per_key);

  int64_t step() const { return step_; }
  int server_rank() const { return server_rank_; }  // the server's numbering (Elect)
  const ExchangeTraits& traits() const { return exchange_->traits(); }
  PsClient& client() { return *client_.client; }
  CodecState& codecs() { return *client_.codecs; }
  ShardRejoin* shard_rejoin() { return client_.rejoin; }  // null: one server

 private:
  void ChooseCodecs();         // compress.auto: calibrates, chooses per key and logs it
  void AdoptServerMomentum();  // AdoptServerWeights' optimizer state
  // The ladder's decision as the push codec (epoch -1: the start).
  void SetPushCodec(const CompressionDecision& d, int64_t epoch);

  EngineOptions opt_;
  WorkerClient client_;
  std::unique_ptr<Exchange> exchange_;
  GradientFeed* feed_ = nullptr;          // the pipelined exchange, fed by the front end's hooks
  std::unique_ptr<PendingStep> pending_;  // cross-barrier: the step whose results are arriving
  std::unique_ptr<CompressionController> controller_;  // compress.dynamic.ladder set
  double push_ratio_ = 0;                              // DGC warm-up: the final density
  std::vector<CodecSpec> auto_push_;                   // compress.auto: per key, once chosen
  int64_t step_ = 0;
  int server_rank_ = 0;
  bool prepared_ = false;  // PrepareGradients ran for this step
};

}  // namespace gradpress::worker
