#pragma once
// The types an Exchange (exchange.h) is made with and reports: what the Trainer lends it,
// what it tells the Trainer, where it stands for checkpoints, a deferred step's results.
// Thread-safety: values.
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "common/config.h"
#include "worker/client/ps_client.h"
#include "worker/client/step_metrics.h"

namespace gradpress::worker {

// A deferred step completed by Settle.
struct SettledStep {
  StepMetrics stats;
  double exposed_ms = 0;  // waited for its results (in layer gates and in Settle)
  double apply_ms = 0;    // local optimizer steps on its results
};

// What the Trainer lends its exchange (it outlives the exchange).
struct ExchangeContext {
  const Config* config = nullptr;
  int rank = 0;  // for logs
  PsClient* client = nullptr;
  std::vector<torch::Tensor>* params = nullptr;  // the model's parameters (leaves)
  // The local optimizer; null for exchange=weights, and when the caller steps its own
  // (gradpress.torch: a Python optimizer): gradient methods then leave the averaged (or
  // rescaled) gradients in p.grad for it, and method 6 expects it to have stepped on the
  // worker's own gradients before Finish.
  torch::optim::Optimizer* optimizer = nullptr;
  // The pipelined step's gradients: true, from hooks it registers on the parameters; false,
  // fed by the front end (GradientFeed: gradpress.torch's hooks, which also carry the lr).
  bool register_hooks = true;
};

// The pipelined step fed by its front end: backward's gradients as they are produced, after
// the step's Begin (exchange.h). Only an exchange that sends buckets during backward is one.
class GradientFeed {
 public:
  // Key `key`'s gradient of the step begun (held, not copied, until the step finishes).
  virtual void Gradient(size_t key, const torch::Tensor& grad) = 0;

 protected:
  ~GradientFeed() = default;
};

// What the Trainer needs to know of a method's exchange, fixed once it is made.
struct ExchangeTraits {
  bool stats_keys = false;        // gaussian: each key travels as its (mean, std), shape {2}
  std::vector<int> bucket_keys;   // the pipelined step's split, keys per bucket (empty: none)
  bool server_follows_lr = true;  // the server's SGD or shadow weights take the worker's lr
  bool overlaps = false;          // the pipelined step
  bool defers = false;  // cross-barrier: every Finish leaves its step pending until Settle
  // Where a worker without a checkpoint of the server's step goes on from (resume, rejoin;
  // trainer_checkpoint.cc): kModel, the server's weights are the model (methods 1-2: only
  // push residuals are lost); kShadow, the server keeps the workers' weights
  // (server.shadow_weights, methods 3-6: the newest checkpoint's optimizer state with them).
  enum class ServerWeights { kNone, kModel, kShadow } server_weights = ServerWeights::kNone;
};

// Where the exchange stands, for checkpoints: the server's step (method 6: the syncs done),
// the local steps since the last exchange (method 6; else 0: checkpoints are taken where this
// is 0), and extra state tensors (method 6: its anchor), aliases a checkpoint reads into.
struct ExchangeState {
  int64_t server_step = 0;
  int64_t since_exchange = 0;
  std::vector<torch::Tensor> tensors;
};

}  // namespace gradpress::worker
