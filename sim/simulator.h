#pragma once
// Simulator: N workers of a gradpress job in one process, without gRPC (the MSc thesis's
// gradient-accumulation simulation), for fast sweeps. It uses the code the real job runs:
// server::ParameterStore (StoreOptionsFromConfig) aggregates, steps the server SGD and
// encodes with the pull codec; each simulated worker has its own push codec per key
// (compressors::MakeCompressor, small tensors uncompressed, as PsClient does); data, model
// init and lr schedule are the Trainer's (worker/trainer.h).
//
//   SimOptions o{config, /*workers=*/2, run_dir};
//   worker::TrainSummary s = Simulator(o).Run();   // metrics.jsonl + summary.json in run_dir
//
//   Simulator sim(o);                              // step-level API (tests)
//   auto m = sim.Step(batches, lr);                // one batch per worker; one StepMetrics each
//
// Methods 1-5 (sync.every 1): in sync mode every worker holds the same weights, so one model
// computes each worker's gradient on that worker's batch in turn; each worker's BatchNorm
// running statistics are swapped in and out around its pass (they stay local, as in the real
// job). exchange=gradients: the averaged gradient steps one local torch::optim::SGD;
// exchange=weights: the model adopts the server's weights, the server steps with `lr`.
// Method 6 (sync.every > 1): one model and optimizer per worker; every sync.every steps the
// update since the last sync goes through the store; each epoch ends with model_selection
// best (all adopt the weights of the worker with the best test accuracy, ties to the lowest
// rank) or average (a final sync), as trainer_periodic.cc does.
// Unsupported (InvalidArgument at construction, naming the key): sync.mode async (its result
// depends on the order pushes arrive in), sync.exchange other than gradients and weights, and
// any compress.* key other than min_numel and skip_1d set away from its default (worker-side
// codec features the simulator does not model). It writes no checkpoints and cannot resume.
// Timings per worker step: compute_ms (its forward + backward, plus the optimizer step every
// worker pays), encode_ms (its push), decode_ms (the step's result, decoded once), server_ms
// (the store's finalize + mean validate/accumulate per push, what a real PullHeader reports);
// network_ms and wait_ms are 0; step_ms = compute + encode + server + decode: a step over an ideal
// network, no stragglers. Thread-safety: one thread per Simulator.
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/config.h"
#include "compressors/compressor.h"
#include "server/parameter_store.h"
#include "worker/data/dataset.h"
#include "worker/models/net.h"
#include "worker/trainer.h"

namespace gradpress::sim {

struct SimOptions {
  Config config;
  int workers = 2;        // simulated workers (the config's cluster.workers is ignored)
  std::string run_dir;    // "" = no files
  int64_t max_steps = 0;  // > 0: stop after this many steps in all (then evaluate)
};

struct SimStepMetrics : worker::StepMetrics {
  double server_ms = 0;  // the store's share of this worker's step
};

class Simulator {
 public:
  explicit Simulator(SimOptions options);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // One training step: batches[r] is worker r's batch (images [B, C, H, W], labels [B]);
  // lr is the step's scheduled rate. Returns one metrics record per worker.
  std::vector<SimStepMetrics> Step(const std::vector<worker::data::Dataset>& batches, double lr);
  // All epochs (or max_steps), evaluating per epoch, as Trainer::Run does; writes
  // run_dir/metrics.jsonl (lines of every rank) and run_dir/summary.json (rank 0's view).
  worker::TrainSummary Run();
  // Test-set accuracy (0..1) of worker `rank`'s model (its own BatchNorm statistics).
  double Evaluate(int rank = 0);

  int workers() const { return opt_.workers; }
  int64_t step() const { return step_; }
  // Worker `rank`'s parameters (detached aliases, model order).
  std::vector<torch::Tensor> Parameters(int rank = 0) const;
  // Worker `rank`'s BatchNorm running statistics (model order; copies between steps).
  std::vector<torch::Tensor> Buffers(int rank = 0);
  const worker::data::DatasetPair& data() const { return data_; }
  server::ParameterStore& store() { return *store_; }

 private:
  struct Worker {
    server::WorkerId id;
    std::vector<std::unique_ptr<compressors::Compressor>> push;  // per key, own error feedback
    std::vector<torch::Tensor> buffers;  // single model: this worker's BatchNorm statistics
    std::vector<torch::Tensor> anchor;   // method 6: weights at the last sync
    std::mt19937_64 rng;                 // data augmentation, seeded as the Trainer's
  };
  bool periodic() const { return opt_.config.sync.every > 1; }
  torch::nn::Module& ModelOf(int rank);
  std::vector<torch::Tensor>& ParamsOf(int rank) { return params_[periodic() ? rank : 0]; }
  torch::optim::Optimizer& OptimizerOf(int rank) { return *optimizers_[periodic() ? rank : 0]; }
  void SwapIn(int rank);   // single model: worker rank's BatchNorm statistics in
  void SwapOut(int rank);  // ... and back out
  // Forward + backward of worker rank on its batch; fills m.loss, m.correct, m.compute_ms.
  std::vector<torch::Tensor> Gradients(int rank, const worker::data::Dataset& batch,
                                       SimStepMetrics* m);
  // Encodes worker rank's tensors with its push codecs and pushes them for `step` (no wait).
  void Push(int rank, int64_t step, const std::vector<torch::Tensor>& tensors, double lr,
            SimStepMetrics* m);
  // The store's result of `step`, decoded into received_; returns decode ms, sets its payload
  // bytes and the store's server_ms (finalize + mean apply per push, as PullHeader says).
  double PullResult(int64_t step, uint64_t* bytes, double* server_ms);
  void ApplyLr(double lr);
  // Method 6 (sim_periodic.cc).
  void Sync(std::vector<SimStepMetrics>* ms, double lr);
  double EndEpochPeriodic(int64_t epoch, std::vector<double>* up, std::vector<double>* down);

  SimOptions opt_;
  torch::Device device_;
  worker::data::DatasetPair data_;
  std::vector<std::shared_ptr<worker::models::Net>> models_;  // 1, or one per worker (method 6)
  std::vector<std::vector<torch::Tensor>> params_;            // per model
  std::vector<std::unique_ptr<torch::optim::Optimizer>> optimizers_;  // exchange=gradients
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<server::ParameterStore> store_;
  std::vector<compressors::TensorSpec> specs_;
  std::vector<torch::Tensor> received_;  // the step's decoded result (CPU float32)
  std::map<std::string, std::unique_ptr<compressors::Compressor>> decoders_;  // by codec
  bool exchange_weights_ = false;
  int64_t step_ = 0;
  int64_t sync_round_ = 0;  // method 6: the store's step
  int64_t since_sync_ = 0;  // method 6: local steps since the last sync
  int64_t dense_bytes_ = 0;
};

}  // namespace gradpress::sim
