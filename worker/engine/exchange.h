#pragma once
// Exchange: one way of exchanging a training step with the parameter server, over a PsClient
// (ps_client.h): the method under the StepEngine (step_engine.h), which both front ends loop
// over. It does everything between backward and the next forward: push, pull, and the update
// of the parameters. MakeExchange picks one from the config:
//
//   gradients  (methods 3-5)   the averaged gradient comes back into p.grad; the local
//                              optimizer steps (every worker the same step).
//   weights    (methods 1-2)   the server steps SGD (lr = the worker's schedule) and returns
//                              weights, copied into the parameters. sync.mode async: a push
//                              too stale is dropped and the current weights are pulled.
//   pipelined  (1-5, overlap)  buckets leave from autograd hooks during backward
//                              (bucket_scheduler.h); gradients or weights as above.
//                              sync.cross_barrier: Finish returns when backward ends; the
//                              next forward waits in each layer's gate (models::Net) for that
//                              layer's bucket and applies it, so it runs while later buckets
//                              are still in flight; Settle completes the step.
//   gaussian                   each key's (mean, std) is averaged; local gradients are
//                              rescaled to it; the optimizer steps.
//   periodic   (method 6)      local steps; every sync.every steps the update since the last
//                              sync is averaged; each epoch ends with model selection.
//
// The interface is three calls, each every exchange's own: Reset (go on from the server's
// step), Finish (the step after backward; cross-barrier returns it still pending) and
// EndEpoch (method 6's epoch rule; the others report the accuracy as measured). A pending
// step (PendingStep) is settled layer by layer or whole; the pipelined step is fed by a front
// end's own hooks through GradientFeed (exchange_types.h). Everything else (the lr, the
// initial weights, the checkpoint counters) is the base class's, the same for all.
//
//   std::unique_ptr<Exchange> ex = MakeExchange(ctx);   // after the optimizer exists
//   client.Register(specs, ex->traits().bucket_keys);  ex->Init();  step = ex->Reset(server_step);
//   per step: forward (pending->Settle(&layer) in each layer's gate; pending->Settle(nullptr)
//             before anything else reads the weights); ex->Prepare(step, lr); backward;
//             pending = ex->Finish(step, &metrics);
//
// Thread-safety: the training thread (the pipelined exchange runs threads of its own).
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "common/config.h"
#include "worker/client/ps_client.h"
#include "worker/client/step_metrics.h"
#include "worker/engine/exchange_types.h"

namespace gradpress::worker {

// A step whose results are still arriving (cross-barrier): the next forward applies them
// layer by layer. Destroyed unsettled (a rejoin, an abandoned step), it waits for its buckets
// and applies nothing more.
class PendingStep {
 public:
  virtual ~PendingStep() = default;
  // layer: waits for the results of its parameters and applies them (returns false: the rest
  // is still pending). Null: waits for every bucket, applies the rest, fills *done and returns
  // true. A failed exchange is rethrown, and nothing is pending after.
  virtual bool Settle(const torch::nn::Module* layer, SettledStep* done) = 0;
};

class Exchange {
 public:
  Exchange(ExchangeContext ctx, ExchangeTraits traits);
  virtual ~Exchange() = default;
  const ExchangeTraits& traits() const { return traits_; }
  // The shape a parameter's key has on the server.
  std::vector<int64_t> KeyShape(const torch::Tensor& p) const;
  // Before backward of `step`: its lr, the local optimizer's and (server_follows_lr) the
  // server's SGD or shadow weights'. The pipelined step begins its buckets at the first
  // gradient after it: a backward between a step's Finish and the next Prepare (an
  // evaluation's probe) is not the exchange's. Between steps (nothing pending). key_lr: per
  // key (model order) the lr of the server's SGD or shadow step, replacing lr there
  // (gradpress.torch's param groups); empty: lr for every key.
  void Prepare(int64_t step, double lr, std::vector<double> key_lr = {});
  // After Register: offers the initial weights (the first worker's win; gaussian: zero
  // statistics) and adopts the server's. Returns true if ours were kept. offer false: offers
  // none and waits for another worker's (a root rank's).
  bool Init(bool offer = true);
  // Checkpoints: where the exchange stands at local step `step` (its tensors are read in
  // place before Restore), and the counters restored.
  ExchangeState State(int64_t step) const;
  void Restore(int64_t server_step, int64_t since_exchange);

  // After Init, a rejoin, or adopting the server's weights: go on from the server's step with
  // the current parameters (nothing is pending). Returns the worker's local step there.
  virtual int64_t Reset(int64_t server_step) = 0;
  // After backward (and clipping): p.grad holds this worker's gradients. Exchanges and updates
  // the parameters; merges the calls' metrics into *m, adds local update time to
  // m->compute_ms, sets m->overlap, m->exposed_comm_ms (overlapping exchanges) and m->stale.
  // Cross-barrier returns the step still pending (traits().defers); else null.
  virtual std::unique_ptr<PendingStep> Finish(int64_t step, StepMetrics* m) = 0;
  // End of an epoch: the test accuracy to report. Method 6 first applies its epoch rule
  // (server_rank: this worker's rank in the server's numbering, for Elect) and merges its
  // exchange's metrics into *m; the others have no rule: evaluate()'s accuracy.
  virtual double EndEpoch(int64_t epoch, const std::function<double()>& evaluate, int server_rank,
                          StepMetrics* m);

 protected:
  // A whole-model call of `step` with the lr set for it.
  StepCall Call(int64_t step, int64_t base_step = 0) const;
  // WriteGradients(params, received), then the optimizer's step if there is one; returns
  // the ms it took.
  double ApplyGradients(const std::vector<torch::Tensor>& received);
  std::vector<torch::Tensor> Aliases() const;  // detached aliases of the parameters
  std::vector<torch::Tensor> ZerosLikeParams() const;
  // Steps the local optimizer, if there is one (else the caller steps its own).
  void StepOptimizer();
  ExchangeContext ctx_;
  ExchangeTraits traits_;
  int64_t step_ = 0;                   // Prepare's
  bool prepared_ = false;              // Prepare ran; the step's Finish (or a Reset) has not
  std::optional<double> server_lr_;    // Prepare's, when the server follows it
  std::vector<double> server_key_lr_;  // Prepare's per-key lr, when the server follows it
  // Method 6's counters (syncs done, local steps since, its anchor), when it keeps its own;
  // else State is the local step's.
  std::optional<ExchangeState> counters_;
};

// Writes received[i] into params[i]'s gradient: in place when it has one of the same shape,
// device and dtype, else as a copy (received is the next step's buffer).
void WriteGradients(const std::vector<torch::Tensor>& params,
                    const std::vector<torch::Tensor>& received);

std::unique_ptr<Exchange> MakeExchange(ExchangeContext ctx);
// Method 6 (exchange_periodic.cc); MakeExchange picks it for sync.every > 1.
std::unique_ptr<Exchange> MakePeriodicExchange(ExchangeContext ctx);
// Methods 1-5 pipelined (pipelined_exchange.cc): sync.overlap, `split` of several buckets.
std::unique_ptr<Exchange> MakePipelinedExchange(ExchangeContext ctx, std::vector<int> split);

}  // namespace gradpress::worker
