#pragma once
// Exchange: one way of exchanging a training step with the parameter server, over a
// ServerClient (gRPC or in-process). The Trainer runs the epoch loop, forward and backward;
// its Exchange does everything between backward and the next forward: push, pull, and the
// update of the parameters. MakeExchange picks one from the config:
//
//   gradients  (methods 3-5)   the averaged gradient comes back into p.grad; the local
//                              optimizer steps (every worker the same step).
//   weights    (methods 1-2)   the server steps SGD (lr = the worker's schedule) and returns
//                              weights, copied into the parameters. sync.mode async: a push
//                              too stale is dropped and the current weights are pulled.
//   buckets    (1-5, overlap)  the pipelined step (bucket_exchange.h): buckets leave from
//                              autograd hooks during backward; gradients or weights as above.
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
//   client.Register(specs, ex->bucket_keys());  ex->Init();  step = ex->Reset(server_step);
//   per step: forward; ex->Settle(&done) (the previous step, if pending); ex->Begin(step);
//             backward; ex->Finish(step, &metrics);
//
// Thread-safety: the Trainer's thread (the buckets exchange runs threads of its own).
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "common/config.h"
#include "worker/server_client.h"

namespace gradpress::worker {

struct StepMetrics;

// A deferred step completed by Settle.
struct SettledStep {
  StepStats stats;
  double exposed_ms = 0;  // waited for its results (in layer gates and in Settle)
  double apply_ms = 0;    // local optimizer steps on its results
};

// What the Trainer lends its exchange (it outlives the exchange).
struct ExchangeContext {
  const Config* config = nullptr;
  int rank = 0;  // for logs
  ServerClient* client = nullptr;
  std::vector<torch::Tensor>* params = nullptr;  // the model's parameters (leaves)
  torch::optim::Optimizer* optimizer = nullptr;  // null for exchange=weights
};

class Exchange {
 public:
  explicit Exchange(ExchangeContext ctx) : ctx_(ctx) {}
  virtual ~Exchange() = default;

  // Registration: the shape each key has on the server (gaussian: {2}), and the bucket split.
  virtual std::vector<int64_t> KeyShape(const torch::Tensor& p) const { return p.sizes().vec(); }
  virtual std::vector<int> bucket_keys() const { return {}; }
  // After Register: offers the initial weights (the first worker's win) and adopts the server's.
  virtual void Init();
  // After Init, a rejoin, or adopting the server's weights: go on from the server's step with
  // the current parameters. Returns the worker's local step there.
  virtual int64_t Reset(int64_t server_step) { return server_step; }
  // The step's lr: the local optimizer's, and (where server_follows_lr) the server's SGD or
  // shadow weights' (set_server_lr).
  virtual void SetLr(double lr);
  virtual bool server_follows_lr() const { return true; }

  // After forward (and Settle), before backward of `step` (buckets: arms the hooks).
  virtual void Begin(int64_t step) { (void)step; }
  // After backward (and clipping): p.grad holds this worker's gradients. Exchanges and updates
  // the parameters; adds local update time to m->compute_ms, sets m->overlap,
  // m->exposed_comm_ms (overlapping exchanges only) and m->stale.
  virtual StepStats Finish(int64_t step, StepMetrics* m) = 0;
  virtual bool overlaps() const { return false; }
  // Cross-barrier: whether Finish may return before the step's results are in (then the
  // model's layer gates call GateLayer); pending: a step awaits Settle.
  virtual bool defers() const { return false; }
  virtual bool pending() const { return false; }
  // Waits for the pending step's results of `layer`'s parameters and applies them.
  virtual void GateLayer(const torch::nn::Module& layer) { (void)layer; }
  // Completes the pending step (waits for every bucket, applies the rest); false if none was.
  // A failed exchange is rethrown here (or from GateLayer), and nothing is pending after.
  virtual bool Settle(SettledStep* done) {
    (void)done;
    return false;
  }
  // The server's step at local step `step` (method 6: the syncs done), and local steps since
  // the last exchange (method 6; else 0): checkpoints are taken where this is 0.
  virtual int64_t server_step(int64_t step) const { return step; }
  virtual int64_t since_exchange() const { return 0; }
  // Checkpoints: extra state tensors (method 6: its anchor) and the counters restored.
  virtual std::vector<torch::Tensor> state_tensors() { return {}; }
  virtual void Restore(int64_t server_step, int64_t since_exchange) {
    (void)server_step, (void)since_exchange;
  }
  // End of an epoch: the test accuracy to report (method 6 first applies its epoch rule;
  // server_rank: this worker's rank in the server's numbering, for Elect). Adds any bytes
  // exchanged to *up / *down.
  virtual double EndEpoch(int64_t epoch, const std::function<double()>& evaluate, int server_rank,
                          double* up, double* down) {
    (void)epoch, (void)server_rank, (void)up, (void)down;
    return evaluate();
  }

 protected:
  // Copies `received` into p.grad and steps the optimizer; returns the ms it took.
  double ApplyGradients(const std::vector<torch::Tensor>& received);
  std::vector<torch::Tensor> Aliases() const;  // detached aliases of the parameters
  std::vector<torch::Tensor> ZerosLikeParams() const;
  ExchangeContext ctx_;
};

std::unique_ptr<Exchange> MakeExchange(ExchangeContext ctx);
// Method 6 (exchange_periodic.cc); MakeExchange picks it for sync.every > 1.
std::unique_ptr<Exchange> MakePeriodicExchange(ExchangeContext ctx);
// Methods 1-5 pipelined (exchange_buckets.cc): sync.overlap, `split` of several buckets.
std::unique_ptr<Exchange> MakeBucketsExchange(ExchangeContext ctx, std::vector<int> split);

}  // namespace gradpress::worker
