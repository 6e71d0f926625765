#pragma once
// Trainer: one worker's training loop against the parameter server (shared/DESIGN.md), a loop
// over the StepEngine (step_engine.h), which gradpress.torch's session shares. Loads its shard
// of the data, builds the model and its optimizer, connects through the engine, then per
// step: forward, cross-entropy, backward, and the engine's step (clipping, the method's
// exchange and update, the push codec's policy). The next batch is gathered (and augmented)
// on a second thread while a step runs.
//
//   TrainerOptions o{config, /*rank=*/0, /*workers=*/2, "127.0.0.1:50051", run_dir};
//   TrainSummary s = Trainer(o).Run();      // all epochs (or max_steps), evaluates per epoch
//
//   Trainer t(o);  t.Connect();             // step-level API (tests)
//   StepMetrics m = t.Step(images, labels); // one synchronous exchange
//
// The lr follows train.lr_schedule (lr_schedule.h) by fractional epoch; the local optimizer is
// torch::optim::SGD from config.train (exchange=gradients, method 6), or none (weights: the
// server steps). Data: data::EpochIndices(n, rank, workers, epoch, seed); step s of an epoch
// trains on the shard's indices [s*b, (s+1)*b). cifar10 batches get AugmentCifar.
// Outputs (run_files.h): metrics.jsonl lines and the dashboard's rows; rank 0's summary.json.
// Checkpoints (trainer_checkpoint.cc) hold step, model, optimizer, the exchange's state, the
// push codecs' state and the augmentation RNG; without a checkpoint of the server's step a
// worker goes on as its exchange's traits say (ExchangeTraits::server_weights).
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
#include "worker/client/client_factory.h"
#include "worker/client/step_metrics.h"
#include "worker/data/dataset.h"
#include "worker/engine/step_engine.h"
#include "worker/loop/run_files.h"
#include "worker/models/net.h"

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
  const std::atomic<bool>* stop = nullptr;  // set (SIGTERM): finish the step, checkpoint, return
  // The exchange's carrier: null = gRPC to `server`; gradpress-sim passes its in-process one.
  CarrierFactory make_client;
  const data::DatasetPair* data = nullptr;  // preloaded, shared read only (null: config.dataset)
  std::function<void(JsonLine&)> summary_extra;  // summary.json's extra fields (sim: "runner")
};

class Trainer {
 public:
  explicit Trainer(TrainerOptions options);
  ~Trainer();  // not copyable: it owns its client and model

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

  int64_t step() const { return engine_->step(); }
  // The server step this worker is at (step() for methods 1-5, syncs done for method 6).
  int64_t server_step() const { return engine_->State().server_step; }
  // Writes a checkpoint of the current state (after a step; see TrainerOptions) and returns
  // its path ("" without a checkpoint directory).
  std::string WriteCheckpoint();
  models::Net& model() { return *model_; }
  std::vector<torch::Tensor> Parameters();  // detached aliases, model order (settled)
  const data::DatasetPair& data() const { return data_; }
  const TrainerOptions& options() const { return opt_; }

 private:
  // Mean cross-entropy over the first max_images training images, in eval mode.
  double ProbeTrainLoss(int64_t max_images);
  // Connect; resume: restore the checkpoint of the server's step.
  void Connect(bool resume);
  void Resume(int64_t server_step);
  // Registers again after LostByServer and goes on from the server's step; returns the steps
  // rolled back, or -1 (nothing changed) when there is no way back.
  int64_t Rejoin(const Error& why);
  void RestoreCheckpoint(const Checkpoint& c);
  // The pending step settled into held_ (returns the ms spent waiting for and applying it).
  double SettleHeld();
  struct Epoch;  // Run's parts (trainer_run.cc)
  void RunEpoch(Epoch* e, TrainSummary* s);
  void EndEpoch(Epoch* e, TrainSummary* s);
  void Account(const StepMetrics& m, Epoch* e, TrainSummary* s);
  void Finish(TrainSummary* s, double wall_s);

  TrainerOptions opt_;
  torch::Device device_;
  data::DatasetPair data_;
  std::shared_ptr<models::Net> model_;
  std::vector<torch::Tensor> params_;  // the model's parameters (leaves)
  std::shared_ptr<RowOutbox> rows_;    // the dashboard's rows for the client to carry
  std::unique_ptr<torch::optim::Optimizer> optimizer_;  // not for exchange=weights
  RunFiles files_;
  std::unique_ptr<StepEngine> engine_;  // the client, the method's exchange, the step's rules
  std::optional<StepMetrics> held_;     // cross-barrier: the step whose results are arriving
  std::vector<StepMetrics> finished_;   // complete rows not yet taken
  bool connected_ = false;
  int64_t steps_per_epoch_ = 1;
  int64_t dense_bytes_ = 0;
  std::mt19937_64 rng_;  // data augmentation
  std::string checkpoint_dir_;
  int64_t last_checkpoint_ = -1;  // server step of the last checkpoint written or restored
};

}  // namespace gradpress::worker
