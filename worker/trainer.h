#pragma once
// Trainer: one worker's training loop against the parameter server (shared/DESIGN.md,
// methods 1-5). Loads its shard of the data, builds the model, registers with the server,
// adopts the server's initial weights, then per step: forward, cross-entropy, backward,
// its Exchange (exchange.h: the method's push, pull and update, over a ServerClient).
// The pipelined step (sync.overlap, methods 1-5 in sync mode; bucket_exchange.h): autograd
// hooks on the parameters hand each bucket of gradients to the exchange threads while
// backward still runs; the step then waits for the buckets still out (exposed_comm_ms) and
// applies them. Off, for a model that fits one bucket, or for method 6, gaussian and async:
// the serial step. Both give the same weights. The next batch is gathered (and augmented) on
// a second thread while a step runs.
//
//   TrainerOptions o{config, /*rank=*/0, /*workers=*/2, "127.0.0.1:50051", run_dir};
//   TrainSummary s = Trainer(o).Run();      // all epochs (or max_steps), evaluates per epoch
//
//   Trainer t(o);  t.Connect();             // step-level API (tests)
//   StepMetrics m = t.Step(images, labels); // one synchronous exchange
//
// exchange=gradients (methods 3-5): the averaged gradient comes back into p.grad and a local
//   torch::optim::SGD (lr, momentum, weight_decay, nesterov from config.train) steps; every
//   worker applies the same gradient to the same weights. The lr follows train.lr_schedule
//   (lr_schedule.h) by fractional epoch.
// exchange=weights (methods 1-2): the server steps SGD and returns weights, copied into the
//   parameters; each push carries the lr of the worker's schedule for the server's step.
// sync.mode async (methods 1-2 only): each push is applied by the server at once and the
//   current weights come back; the push names the server step of the weights it was computed
//   on, and the server refuses it if that is more than sync.max_staleness steps behind; the
//   trainer then drops that gradient and pulls the current weights.
// Data: data::EpochIndices(n, rank, workers, epoch, seed); step s of an epoch trains on the
//   shard's indices [s*b, (s+1)*b) (the last batch may be short, equally on every rank).
//   cifar10 batches get AugmentCifar; other datasets are not augmented.
// Run directory (run_dir non-empty): appends to run_dir/metrics.jsonl one line per step
//   {rank, step, loss, bytes_up, bytes_down, compute_ms, encode_ms, decode_ms, network_ms,
//   wait_ms, server_ms, exposed_comm_ms, overlap, retries (only when > 0)}, one per rejoin {rank,
//   step, event, steps_lost}, one per epoch {rank, epoch, train_acc, test_acc, epoch_s}; rank 0
//   writes run_dir/summary.json at the end (DESIGN.md field names; method = config name).
// Checkpoints hold step, model (parameters and buffers), optimizer, method 6's anchor, the
//   push codecs' residuals and the augmentation RNG; the data cursor is the step (each
//   epoch's order is a function of seed and epoch). A run stopped after a checkpoint and
//   resumed (server too) ends with the weights of an uninterrupted run.
// Thread-safety: one thread per Trainer. Several Trainers may run in one process (tests);
//   model construction is serialised because it seeds torch's global generator.
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/checkpoint.h"
#include "common/config.h"
#include "common/error.h"
#include "common/json_line.h"
#include "worker/compression_schedule.h"
#include "worker/data/dataset.h"
#include "worker/exchange.h"
#include "worker/models/net.h"
#include "worker/server_client.h"

namespace gradpress::worker {

struct TrainerOptions {
  Config config;
  int rank = 0;
  int workers = 1;
  std::string server;   // host:port; "" = config.cluster.server
  std::string run_dir;  // "" = no files
  uint64_t incarnation = 1;
  int64_t max_steps = 0;  // > 0: stop after this many steps in all (then evaluate); 0 = epochs
  // Checkpoints (trainer_checkpoint.cc) go to checkpoint_dir ("" = run_dir/ckpt/worker-<rank>,
  // none without a run_dir): every train.checkpoint_every server steps and at the end.
  std::string checkpoint_dir;
  // Resume from checkpoint_dir: the checkpoint of the server's current step (so restart the
  // server with --resume auto too); a fresh start if the directory holds none.
  bool resume = false;
  // Set asynchronously (SIGTERM): Run finishes the current step, checkpoints and returns.
  const std::atomic<bool>* stop = nullptr;
  // The exchange's carrier: null = PsClient (gRPC to `server`); gradpress-sim passes one that
  // builds an in-process client over its ParameterStore.
  std::function<std::unique_ptr<ServerClient>(const ClientOptions&)> make_client;
  // Preloaded data (its tensors are shared, read only; null = load config.dataset).
  const data::DatasetPair* data = nullptr;
  // summary.json: extra fields (gradpress-sim: "runner").
  std::function<void(JsonLine&)> summary_extra;
};

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;  // this worker's batch mean, before the update
  uint64_t bytes_up = 0, bytes_down = 0;
  double compute_ms = 0;  // forward + backward + local optimizer step
  double encode_ms = 0, decode_ms = 0, network_ms = 0, wait_ms = 0;
  double server_ms = 0;  // the server's decode + aggregate + encode of this step's result
  double step_ms = 0;    // wall time of the whole step
  int64_t correct = 0;   // correct predictions in the batch (train accuracy)
  bool stale = false;    // async: the push was refused as too stale (dropped)
  int retries = 0;       // RPC attempts retried (UNAVAILABLE, injected faults) in the exchange
  // Time the step waited on communication after backward ended (the exchange's wall time
  // for the serial step); overlap: the pipelined step ran.
  double exposed_comm_ms = 0;
  bool overlap = false;
};

struct EpochMetrics {
  int64_t epoch = 0;
  double train_acc = 0, test_acc = 0, epoch_s = 0;
};

struct TrainSummary {
  int64_t steps = 0, epochs = 0;  // epochs started
  double test_acc = 0;            // last evaluation, 0..1
  double bytes_up_per_step = 0, bytes_down_per_step = 0;
  double ratio_up = 0, ratio_down = 0;  // dense float32 bytes / payload bytes
  double step_ms = 0, compute_ms = 0, encode_ms = 0, network_ms = 0, decode_ms = 0, wait_ms = 0,
         server_ms = 0, exposed_comm_ms = 0;  // means per step
  bool overlap = false;                       // the pipelined step ran
  double wall_s = 0;
  int64_t retries = 0;  // RPC attempts retried in all
  int64_t rejoins = 0;  // times the server lost this worker and it registered again
  std::vector<EpochMetrics> epoch_metrics;
};

// One step's metrics.jsonl line (DESIGN.md field names); callers may append fields.
JsonLine StepJson(int rank, const StepMetrics& m);
// The same step as the dashboard's row, which the worker's next push carries to the server.
proto::WorkerRow StepRow(int rank, const StepMetrics& m);

// Writes run_dir/summary.json (shared/DESIGN.md field names) atomically; `extra` may append
// fields (gradpress-sim adds runner).
void WriteSummaryJson(const std::string& run_dir, const Config& c, int workers,
                      const TrainSummary& s, const std::function<void(JsonLine&)>& extra = {});

class Trainer {
 public:
  explicit Trainer(TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Register + InitOrPull; on a fresh start (server step 0) then waits until all `workers`
  // have registered, since the server's barrier counts registered workers only. Run calls it.
  void Connect() { Connect(opt_.resume); }
  // One training step on a batch (images [B, C, H, W], labels [B]); the step index is
  // step() before the call. Requires Connect(). Returns the step's loss, correct count and
  // compute time at once; its whole row (bytes, exchange times) comes from TakeFinished, at
  // once for the serial step, with cross-barrier (sync.cross_barrier) once the next Step's
  // forward (or Settle) has its results.
  StepMetrics Step(const torch::Tensor& images, const torch::Tensor& labels);
  // Completes a step whose results are still arriving (cross-barrier); a no-op otherwise.
  // Evaluate, Parameters, WriteCheckpoint and Run call it themselves.
  void Settle();
  // The rows of the steps completed since the last call, in step order.
  std::vector<StepMetrics> TakeFinished();
  // Test-set accuracy (0..1) in eval mode; leaves the model in train mode.
  double Evaluate();
  TrainSummary Run();

  int64_t step() const { return step_; }
  // The server step this worker is at (step() for methods 1-5, syncs done for method 6).
  int64_t server_step() const { return exchange_->server_step(step_); }
  // Writes a checkpoint of the current state (after a step; see TrainerOptions) and returns
  // its path ("" without a checkpoint directory).
  std::string WriteCheckpoint();
  models::Net& model() { return *model_; }
  std::vector<torch::Tensor> Parameters();  // detached aliases, model order (settled)
  const data::DatasetPair& data() const { return data_; }
  const TrainerOptions& options() const { return opt_; }

 private:
  // Dynamic compression: installs the decision's push codec and records it (epoch -1: start).
  void SetPushCodec(const CompressionDecision& d, int64_t epoch);
  // Mean cross-entropy over the first max_images training images, in eval mode.
  double ProbeTrainLoss(int64_t max_images);
  // Restores the checkpoint of `server_step` (Connect, when resuming); see TrainerOptions.
  void Resume(int64_t server_step);
  // Gradient methods with server.shadow_weights: the server holds the workers' weights.
  bool ServerHasShadow() const {
    return opt_.config.server.shadow_weights && opt_.config.sync.exchange == "gradients";
  }
  // Connect; resume: restore the checkpoint of the server's step (see TrainerOptions).
  void Connect(bool resume);
  // Registers again after LostByServer and goes on from the server's step: this worker's
  // checkpoint of that step (exact), else the server's weights (methods 1-2, or 3-6 with
  // server.shadow_weights). Returns the steps rolled back, or -1 (nothing changed) when
  // there is no way back (no checkpoint and no server weights to adopt).
  int64_t Rejoin(const Error& why);
  // The rejoin's metrics.jsonl line and dashboard row (shards: those that caught up, or "").
  void NoteRejoin(int64_t lost, const std::string& shards);
  void RestoreCheckpoint(const Checkpoint& c);
  void AppendLine(const std::string& line);
  // Step's parts: the exchange's counters into a row; the pending step settled into held_
  // (returns the ms spent waiting for and applying it).
  static void AddExchange(const StepStats& st, StepMetrics* m);
  double SettleHeld();
  void WriteSummary(const TrainSummary& s) const;

  TrainerOptions opt_;
  torch::Device device_;
  data::DatasetPair data_;
  std::shared_ptr<models::Net> model_;
  std::vector<torch::Tensor> params_;  // the model's parameters (leaves)
  std::unique_ptr<ServerClient> client_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;  // not for exchange=weights
  std::unique_ptr<Exchange> exchange_;                  // the method (exchange.h)
  std::optional<StepMetrics> held_;    // cross-barrier: the step whose results are arriving
  std::vector<StepMetrics> finished_;  // complete rows not yet taken
  bool exchange_weights_ = false;
  bool connected_ = false;
  int64_t step_ = 0;
  int server_rank_ = 0;  // rank the server assigned (Elect answers in these)
  int64_t dense_bytes_ = 0;
  std::unique_ptr<CompressionController> controller_;  // compress.dynamic.ladder set
  double push_ratio_ = 0;                              // DGC warm-up: the final density
  std::mt19937_64 rng_;                                // data augmentation
  std::string checkpoint_dir_;
  int64_t last_checkpoint_ = -1;  // server step of the last checkpoint written or restored
};

}  // namespace gradpress::worker
