#pragma once
// Simulator: N workers of a gradpress job in one process, for fast sweeps: N worker::Trainers,
// each on an InProcessPsClient (sim/in_process_ps_client.h) over one server::ParameterStore built
// from the config as gradpress-server builds it (StoreOptionsFromConfig). There is no copy of the
// training loop, the exchange or the codec setup here: every method, codec and option the
// cluster runs (methods 1-6, gaussian, DGC, dynamic compression, the pipelined step, async)
// runs the same code in the sim; only the wire is missing.
//
//   SimOptions o{config, /*workers=*/2, run_dir};
//   worker::TrainSummary s = Simulator(o).Run();   // metrics.jsonl + summary.json in run_dir
//
// Run() runs every Trainer::Run on its own thread and returns rank 0's summary; the first
// failure shuts the store down (waking the others) and is rethrown after all have stopped.
// The run directory gets what a cluster run's gets (every rank's metrics.jsonl lines, rank
// 0's summary.json, with "runner": "sim"); the data is loaded once and shared read-only.
// In sync mode the result equals the cluster's (tests/sim/sim_test.cc); an async run's
// result depends on the order pushes arrive in, as on the cluster. Timings are the real
// ones of N workers sharing this process's cores, with network_ms 0.
// Thread-safety: one thread calls a Simulator; Run uses N more.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "server/parameter_store.h"
#include "worker/data/dataset.h"
#include "worker/loop/trainer.h"

namespace gradpress::sim {

struct SimOptions {
  Config config;
  int workers = 2;        // simulated workers (the config's cluster.workers is ignored)
  std::string run_dir;    // "" = no files
  int64_t max_steps = 0;  // > 0: stop after this many steps in all (then evaluate)
};

class Simulator {
 public:
  explicit Simulator(SimOptions options);  // builds the store and the N trainers
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // All epochs (or max_steps) on every worker; rank 0's summary.
  worker::TrainSummary Run();
  // Test-set accuracy (0..1) of worker `rank`'s model.
  double Evaluate(int rank = 0) { return trainers_.at(rank)->Evaluate(); }

  int workers() const { return opt_.workers; }
  // Worker `rank`'s parameters (detached aliases, model order).
  std::vector<torch::Tensor> Parameters(int rank = 0) const;
  // Worker `rank`'s BatchNorm running statistics (model order, aliases).
  std::vector<torch::Tensor> Buffers(int rank = 0);
  worker::Trainer& trainer(int rank) { return *trainers_.at(rank); }
  const worker::data::DatasetPair& data() const { return data_; }
  server::ParameterStore& store() { return *store_; }

 private:
  SimOptions opt_;
  worker::data::DatasetPair data_;
  std::unique_ptr<server::ParameterStore> store_;
  std::vector<std::unique_ptr<worker::Trainer>> trainers_;
};

}  // namespace gradpress::sim
