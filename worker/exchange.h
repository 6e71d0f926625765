#pragma once
// Exchange: one way of exchanging a training step with the parameter server, over a PsClient
// (ps_client.h). The Trainer runs the epoch loop, forward and backward; its Exchange does
// everything between backward and the next forward: push, pull, and the update of the
// parameters. MakeExchange picks one from the config:
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
//   std::unique_ptr<Exchange> ex = MakeExchange(ctx);   // after the optimizer exists
//   client.Register(specs, ex->traits().bucket_keys);  ex->Init();  step = ex->Reset(server_step);
//   per step: forward; ex->Settle(&done) (the previous step, if pending); ex->SetLr(lr);
//             ex->Begin(step); backward; ex->Finish(step, &metrics);
//
// Thread-safety: the Trainer's thread (the pipelined exchange runs threads of its own).
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
#include "worker/exchange_types.h"
#include "worker/ps_client.h"
#include "worker/step_metrics.h"

namespace gradpress::worker {

class Exchange {
 public:
  Exchange(ExchangeContext ctx, ExchangeTraits traits);
  virtual ~Exchange() = default;
  const ExchangeTraits& traits() const { return traits_; }
  // The shape a parameter's key has on the server.
  std::vector<int64_t> KeyShape(const torch::Tensor& p) const;
  // The next step's lr: the local optimizer's, and (server_follows_lr) the server's SGD or
  // shadow weights'. Set between steps (nothing pending).
  void SetLr(double lr);

  // After Register: offers the initial weights (the first worker's win) and adopts the server's.
  virtual void Init();
  // After Init, a rejoin, or adopting the server's weights: go on from the server's step with
  // the current parameters. Returns the worker's local step there.
  virtual int64_t Reset(int64_t server_step) { return server_step; }
  // After forward (and Settle), before backward of `step` (pipelined: arms the hooks).
  virtual void Begin(int64_t step) { (void)step; }
  // After backward (and clipping): p.grad holds this worker's gradients. Exchanges and updates
  // the parameters; merges the calls' metrics into *m, adds local update time to
  // m->compute_ms, sets m->overlap, m->exposed_comm_ms (overlapping exchanges) and m->stale.
  virtual void Finish(int64_t step, StepMetrics* m) = 0;
  // Cross-barrier: waits for the pending step's results of `layer`'s parameters, applies them.
  virtual void GateLayer(const torch::nn::Module& layer) { (void)layer; }
  // Completes the pending step (waits for every bucket, applies the rest); false if none was.
  // A failed exchange is rethrown here (or from GateLayer), and nothing is pending after.
  virtual bool Settle(SettledStep* done) {
    (void)done;
    return false;
  }
  // Checkpoints: the state at local step `step`, and the counters restored (its tensors are
  // read in place before).
  virtual ExchangeState State(int64_t step) { return {step, 0, {}}; }
  virtual void Restore(int64_t server_step, int64_t since_exchange) {
    (void)server_step, (void)since_exchange;
  }
  // End of an epoch: the test accuracy to report (method 6 first applies its epoch rule;
  // server_rank: this worker's rank in the server's numbering, for Elect). Merges any
  // exchange's metrics into *m.
  virtual double EndEpoch(int64_t epoch, const std::function<double()>& evaluate, int server_rank,
                          StepMetrics* m) {
    (void)epoch, (void)server_rank, (void)m;
    return evaluate();
  }

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
  std::optional<double> server_lr_;  // SetLr's, when the server follows it
};

// Writes received[i] into params[i]'s gradient: in place when it has one of the same shape,
// device and dtype, else as a copy (received is the next step's buffer).
void WriteGradients(const std::vector<torch::Tensor>& params,
                    const std::vector<torch::Tensor>& received);

std::unique_ptr<Exchange> MakeExchange(ExchangeContext ctx);
// The same choice without the pipelined step (a caller that feeds buckets itself).
std::unique_ptr<Exchange> MakeSerialExchange(ExchangeContext ctx);
// Method 6 (exchange_periodic.cc); MakeExchange picks it for sync.every > 1.
std::unique_ptr<Exchange> MakePeriodicExchange(ExchangeContext ctx);
// Methods 1-5 pipelined (pipelined_exchange.cc): sync.overlap, `split` of several buckets.
std::unique_ptr<Exchange> MakePipelinedExchange(ExchangeContext ctx, std::vector<int> split);

}  // namespace gradpress::worker
