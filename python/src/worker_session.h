#pragma once
// WorkerSession: the C++ half of gradpress.torch.DistributedOptimizer (python/gradpress/torch/).
// A Python training loop's model becomes a gradpress worker through the C++ worker's own
// parts, never a copy of them: the job config (common/config.h: a YAML file and overrides,
// identity from RANK / WORLD_SIZE / GRADPRESS_SERVER), the client gradpress-worker uses
// (worker/client_factory.h: gRPC, one server or the sharded composite, the push codecs' state),
// the BucketScheduler's pipelined buckets (worker/bucket_scheduler.h) or PsClient::PushPull for
// the other steps (worker/exchange.h's serial exchanges, with the caller's optimizer), and
// RunFiles (worker/run_files.h) for metrics.jsonl, the dashboard's rows and summary.json.
// exchange=gradients (3-5) writes the averaged gradients into p.grad for the caller's
// optimizer; exchange=weights (1-2, sync or async) writes the server's weights (its SGD
// stepped with the lr given) into the parameters, and the caller's optimizer does not step;
// sync.every K > 1 (method 6): the caller steps on its own gradients first (local_steps()),
// every K-th Exchange averages the update since the last sync, and EndEpoch applies the
// epoch rule (the best worker's weights, or a final average).
//
//   WorkerSession s(options, names, params);   // params: the model's leaf tensors (aliases)
//   s.Connect();                               // Register + InitOrPull (broadcast_parameters)
//   per step: backward's hooks call s.Gradient(i, g, lr) (s.pipelined()); then
//             StepMetrics m = s.Exchange(lr);  // the averaged gradients are in p.grad
//             ... the wrapped optimizer steps ...;  s.EndStep(loss);
//             (local_steps(): the optimizer steps before Exchange)
//   per epoch (optional; method 6's rule): acc = s.EndEpoch(epoch, my_test_accuracy);
//   s.Close();                                 // summary.json (rank 0), last dashboard rows
//
// Gradients are held, not copied, until Exchange returns. A key that got no gradient in a
// step (an unused parameter) is exchanged as zeros, as the C++ Trainer does. A second
// gradient for a key in one step (two backward passes before step()) is an InvalidArgument.
// Thread-safety: one thread (Python's, holding or not the GIL); the exchange runs on the
// BucketScheduler's threads, which never touch Python.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/config.h"
#include "common/timer.h"
#include "worker/bucket_scheduler.h"
#include "worker/client_factory.h"
#include "worker/exchange.h"
#include "worker/run_files.h"
#include "worker/step_metrics.h"

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
  bool Connect(std::optional<int64_t> restored_step = std::nullopt);
  // A parameter's gradient from its hook (pipelined() only); lr: the step's learning rate.
  void Gradient(size_t key, const torch::Tensor& grad, double lr);
  // Waits for the step's exchange and writes the averaged gradients into p.grad (weights:
  // the server's weights into the parameters).
  StepMetrics Exchange(double lr);
  // After the local optimizer's step: the step's timing, its metrics line and dashboard row.
  void EndStep(double loss);
  // The end of an epoch with this worker's test accuracy: method 6 applies its epoch rule
  // (sync.model_selection) and returns the accuracy of the weights kept; else `accuracy`.
  double EndEpoch(int64_t epoch, double accuracy);
  // summary.json (rank 0, with a run directory), the dashboard's last rows (flush_rows: a
  // Heartbeat, retried while the server is unreachable; a failure is logged), and the end
  // of the client and its heartbeat thread. Idempotent; nothing else may be called after.
  void Close(bool flush_rows = true);

  // The push codecs' state (error-feedback residuals, momenta, RNG), for state_dict.
  std::string SaveState() const;
  void LoadState(std::string_view state);

  bool connected() const { return connected_; }
  bool pipelined() const { return scheduler_ != nullptr; }
  bool weights() const { return weights_; }  // methods 1-2: the server steps
  // Method 6: the caller's optimizer steps on its own gradients before Exchange.
  bool local_steps() const { return config_.sync.every > 1; }
  int64_t step() const { return step_; }
  int rank() const { return id_.rank; }
  int world_size() const { return id_.workers; }
  const std::string& server() const { return id_.server; }
  const std::vector<int>& split() const { return split_; }
  const Config& config() const { return config_; }
  const StepMetrics& last() const { return last_; }

 private:
  void Begin(double lr);                       // the scheduler's step
  std::vector<torch::Tensor> Aliases() const;  // detached aliases of the parameters

  SessionOptions opt_;
  Config config_;
  Identity id_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> params_;       // aliases of the Python parameters
  std::vector<torch::Tensor> received_;     // pipelined: the step's averaged gradients
  std::vector<torch::Tensor> weights_out_;  // weights, pipelined: aliases the results land in
  bool weights_ = false;                    // exchange=weights (methods 1-2)
  std::vector<int> split_;                  // keys per bucket (empty: the serial step)
  std::shared_ptr<worker::RowOutbox> rows_;
  worker::WorkerClient client_;
  std::unique_ptr<worker::BucketScheduler> scheduler_;  // the pipelined step, or
  std::unique_ptr<worker::Exchange> exchange_;          // the method's serial exchange
  int server_rank_ = 0;                                 // the server's numbering (Elect)
  worker::RunFiles files_;
  worker::MetricTotals totals_;
  int64_t dense_bytes_ = 0;
  std::vector<char> got_;  // per key: a gradient arrived this step
  bool begun_ = false;     // the scheduler's step began
  bool connected_ = false, closed_ = false;
  int64_t step_ = 0;
  StepMetrics pending_, last_;
  bool has_pending_ = false;
  Timer since_end_;  // since the previous step ended (or Connect)
  Timer wall_;
};

}  // namespace gradpress::python
