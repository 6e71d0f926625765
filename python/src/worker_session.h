#pragma once
// WorkerSession: the C++ half of gradpress.torch.DistributedOptimizer (python/gradpress/torch/).
// A Python training loop's model becomes a gradpress worker through the StepEngine the C++
// Trainer runs on (worker/engine/step_engine.h: the client, the method's exchange, clipping, the
// push codec's policy: compress.auto, the dynamic ladder, DGC's warm-up), never a copy of it, with
// the job config (common/config.h: a YAML file and overrides, identity from RANK /
// WORLD_SIZE / GRADPRESS_SERVER) and RunFiles (worker/loop/run_files.h) for metrics.jsonl, the
// dashboard's rows and summary.json. The session is a thin loop, as the Trainer is: it adds
// the Python hooks' lr and checks, and the step's timing.
// exchange=gradients (3-5) writes the averaged gradients into p.grad for the caller's
// optimizer; exchange=weights (1-2, sync or async) writes the server's weights (its SGD
// stepped with the lr given) into the parameters, and the caller's optimizer does not step;
// sync.every K > 1 (method 6): the caller steps on its own gradients first (local_steps():
// PrepareGradients, its step, then Exchange), every K-th Exchange averages the update since
// the last sync, and EndEpoch applies the epoch rule (the best worker's weights, or a final
// average).
//
//   WorkerSession s(options, names, params);   // params: the model's leaf tensors (aliases)
//   s.Connect();                               // Register + InitOrPull (broadcast_parameters)
//   per step: s.Begin(lr, key_lr) and backward's hooks call s.Gradient(i, g) (s.pipelined());
//             StepMetrics m = s.Exchange(lr, key_lr);  // the averaged gradients in p.grad
//             ... the wrapped optimizer steps ...;  s.EndStep(loss);
//             (local_steps(): s.PrepareGradients(); the optimizer steps; then Exchange)
//   per epoch: acc = s.EndEpoch(epoch, my_test_accuracy, train_loss);  // method 6's rule,
//             the dynamic ladder's decision (train_loss), the next epoch's warm-up density
//   s.Close();                                 // summary.json (rank 0), last dashboard rows
//
// Gradients are held, not copied, until Exchange returns. A key that got no gradient in a
// step (an unused parameter) is exchanged as zeros, as the C++ Trainer does. A second
// gradient for a key in one step (two backward passes before step()) is an InvalidArgument.
// Thread-safety: one thread (Python's, holding or not the GIL); the exchange runs on the
// engine's threads, which never touch Python.
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/timer.h"
#include "worker/client/step_metrics.h"
#include "worker/engine/step_engine.h"
#include "worker/loop/run_files.h"

namespace gradpress::python {

using worker::StepMetrics;

struct SessionOptions {
  std::string config_path;              // a job YAML; "" = the defaults
  std::vector<std::string> overrides;   // "push={codec: qsgd, levels: 8}", "train.lr=0.1"
  std::optional<int> rank, world_size;  // else $RANK, $WORLD_SIZE (common/config.h)
  std::optional<std::string> server;    // else $GRADPRESS_SERVER, cluster.server
  std::string run_dir;                  // "" = no metrics.jsonl / summary.json
  uint64_t incarnation = 1;             // raise on every restart of the process
};

// "push=<flow mapping>" from a codec shorthand ("topk ratio=0.01 then=qsgd levels=16").
std::string CodecOverride(const std::string& block, const std::string& shorthand);

// The job's dataset as gradpress-worker trains on it (worker/data/): rank's examples of
// `epoch` in training order (batch i is rows [i B, (i + 1) B)), normalised, and the test set.
struct WorkerDataSplits {
  torch::Tensor train_images, train_labels, test_images, test_labels;
};
WorkerDataSplits WorkerData(const Config& c, int rank, int world, int64_t epoch);

class WorkerSession {
 public:
  // names and params: the model's parameters in model order (float32 leaf tensors).
  WorkerSession(SessionOptions options, std::vector<std::string> names,
                std::vector<torch::Tensor> params);
  ~WorkerSession();
  WorkerSession(const WorkerSession&) = delete;
  WorkerSession& operator=(const WorkerSession&) = delete;

  // Registers (once) and adopts the server's initial weights into the parameters (the first
  // worker's offer wins). Returns whether ours were kept. restored_step: the step of a
  // state_dict the caller loaded (a restarted worker, its own checkpoint in the parameters):
  // at the server's step (past 0) and for a gradient method, the parameters are kept, as the
  // C++ worker keeps a checkpoint of the server's step; else the server's weights are taken
  // (methods 1-2: the model; 3-6: server.shadow_weights, the workers' weights of its step).
  // epoch: the epoch training goes on in (DGC's warm-up density). root_rank: only the worker
  // of that rank offers its weights; the others offer none and wait for them.
  bool Connect(std::optional<int64_t> restored_step = std::nullopt, int64_t epoch = 0,
               std::optional<int> root_rank = std::nullopt);
  // The step's learning rate for the server's SGD or shadow weights (methods 1-5), and per key
  // its param group's (model order; empty: lr for every key); once a step, before its first
  // gradient (Exchange begins the step itself when no hook did).
  void Begin(double lr, std::vector<double> key_lr = {});
  // A parameter's gradient from its hook (pipelined() only), after Begin.
  void Gradient(size_t key, const torch::Tensor& grad);
  // Method 6 (local_steps()): zeros for parameters without a gradient and clipping
  // (compress.clip_norm), before the caller's optimizer steps.
  void PrepareGradients();
  // Waits for the step's exchange and writes the averaged gradients into p.grad (weights:
  // the server's weights into the parameters).
  StepMetrics Exchange(double lr, std::vector<double> key_lr = {});
  // After the local optimizer's step: the step's timing, its metrics line and dashboard row.
  void EndStep(double loss);
  // The end of an epoch with this worker's test accuracy: method 6 applies its epoch rule
  // (sync.model_selection) and returns the accuracy of the weights kept; else `accuracy`.
  // train_loss: the training loss on images every worker evaluates alike, which the dynamic
  // ladder (compress.dynamic) needs. The next epoch's warm-up density is set.
  double EndEpoch(int64_t epoch, double accuracy, std::optional<double> train_loss);
  // summary.json (rank 0, with a run directory), the dashboard's last rows (flush_rows: a
  // Heartbeat, retried while the server is unreachable; a failure is logged), and the end
  // of the client and its heartbeat thread. Idempotent; nothing else may be called after.
  void Close(bool flush_rows = true);

  // broadcast_object / broadcast_optimizer_state: the root's bytes under `name` to every
  // worker; the n-th call of a name is its round n (every worker calls alike). The root gets
  // its own back; the others wait (server.deadline_s) for the root's.
  std::string Broadcast(const std::string& name, bool root, std::string data);
  std::string ServerStats();  // the server's counters, Prometheus text

  // The push codecs' state (error-feedback residuals, momenta, RNG), for state_dict.
  std::string SaveState() const;
  void LoadState(std::string_view state);
  // compress.auto's push codec per key (shorthands; empty: none chosen), for state_dict: a
  // restarted worker keeps the codecs its state was saved with.
  std::vector<std::string> AutoCodecs() const;
  void SetAutoCodecs(const std::vector<std::string>& per_key);

  bool connected() const { return connected_; }
  bool pipelined() const { return engine_ && engine_->feeds(); }
  bool weights() const { return config_.sync.exchange == "weights"; }  // methods 1-2
  // Method 6: the caller's optimizer steps on its own gradients before Exchange.
  bool local_steps() const { return config_.sync.every > 1; }
  int64_t step() const { return engine_ ? engine_->step() : 0; }
  int rank() const { return id_.rank; }
  int world_size() const { return id_.workers; }
  const std::string& server() const { return id_.server; }
  std::vector<int> split() const;
  const Config& config() const { return config_; }
  const StepMetrics& last() const { return last_; }

 private:
  worker::StepEngine& Open(const char* what);  // the engine, or a clear error when closed

  SessionOptions opt_;
  Config config_;
  Identity id_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_;  // aliases of the Python parameters
  std::shared_ptr<worker::RowOutbox> rows_;
  worker::RunFiles files_;
  std::unique_ptr<worker::StepEngine> engine_;  // null once closed
  worker::MetricTotals totals_;
  int64_t dense_bytes_ = 0;
  std::vector<char> got_;                      // per key: a gradient arrived this step
  std::map<std::string, int64_t> broadcasts_;  // per name: the broadcasts made
  bool begun_ = false;                         // the engine's step began
  bool connected_ = false;
  StepMetrics pending_, last_, prepared_;
  bool has_pending_ = false;
  Timer since_end_;  // since the previous step ended (or Connect)
  Timer wall_;
};

}  // namespace gradpress::python
