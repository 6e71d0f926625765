// `gradpress-bench train`: what the parameter server costs per training step. One run
// measures, on the same data and model:
//   single   one process training the job's total batch (workers x batch_size) with plain
//            torch::optim::SGD, at 1 intra-op thread and at `workers` threads (the same cores
//            the distributed job uses);
//   ps       a ServerRunner on 127.0.0.1:0 in this process and `workers` Trainer threads
//            (1 intra-op thread each, as gradpress-worker runs by default) exchanging
//            through it with the config's method (default configs/lenet_fmnist_m1.yaml).
// Reported: median ms per step after warm-up, the PS step split into compute / encode /
// network / decode / wait, and ps / single for both single-process rows.
//
// The BLAS LibTorch multiplies with is named on stderr and in each JSON row
// (scripts/blas_compare.sh runs this with the reference BLAS and the installed one, alternated).
//
//   gradpress-bench train --config configs/lenet_fmnist_m1.yaml --steps 200 [--json]
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <thread>

#include "bench/bench.h"
#include "common/config.h"
#include "common/error.h"
#include "common/timer.h"
#include "server/server_options.h"
#include "server/server_runner.h"
#include "worker/data/dataset.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/loop/trainer.h"
#include "worker/models/blas.h"
#include "worker/models/model_factory.h"

namespace gradpress::bench {
namespace {

struct TrainOptions {
  std::string config = "configs/lenet_fmnist_m1.yaml";
  std::vector<std::string> overrides;
  int64_t steps = 200;
  int64_t warmup = 20;
  bool json = false;
};

struct Row {
  std::string what;
  int threads = 1, workers = 1;
  int64_t batch = 0;  // per process
  double step_ms = 0, compute_ms = 0, encode_ms = 0, network_ms = 0, decode_ms = 0, wait_ms = 0;
};

// Median ms per step of one process training batches of `batch` with `threads` threads.
Row SingleProcess(const Config& c, const worker::data::DatasetPair& d, int64_t batch, int threads,
                  const TrainOptions& o) {
  worker::SetComputeThreads(threads);
  torch::manual_seed(c.train.seed);
  auto model = worker::models::MakeModel(c.model, d.train.images.size(1), d.train.images.size(2),
                                         worker::data::kNumClasses);
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(c.train.lr)
                                                 .momentum(c.train.momentum)
                                                 .weight_decay(c.train.weight_decay)
                                                 .nesterov(c.train.nesterov));
  const auto idx =
      worker::data::EpochIndices(d.train.size(), 0, 1, 0, static_cast<uint64_t>(c.train.seed));
  const int64_t per_epoch = static_cast<int64_t>(idx.size()) / batch;
  std::vector<double> ms;
  for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
    const int64_t i = s % per_epoch;
    worker::data::Dataset b = worker::data::GatherBatch(d.train, idx, i * batch, (i + 1) * batch);
    Timer t;
    sgd.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(model->forward(b.images), b.labels);
    loss.backward();
    sgd.step();
    if (s >= o.warmup) ms.push_back(t.ElapsedMs());
  }
  Row r;
  r.what = "single";
  r.threads = threads;
  r.batch = batch;
  r.step_ms = r.compute_ms = Median(ms);
  return r;
}

// The distributed job: in-process server, one Trainer thread per worker.
Row ParameterServer(const Config& c, const TrainOptions& o) {
  const int workers = c.cluster.workers;
  server::ServerRunner runner(server::StoreOptionsFromConfig(c), c.server.deadline_s);
  const int port = runner.Start("127.0.0.1:0");
  std::vector<std::unique_ptr<worker::Trainer>> trainers;
  for (int r = 0; r < workers; ++r) {
    worker::TrainerOptions to;
    to.config = c;
    to.rank = r;
    to.workers = workers;
    to.server = "127.0.0.1:" + std::to_string(port);
    trainers.push_back(std::make_unique<worker::Trainer>(to));
  }
  std::vector<std::vector<worker::StepMetrics>> metrics(workers);
  std::vector<std::exception_ptr> errors(workers);
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&, r] {
      try {
        worker::Trainer& t = *trainers[r];
        t.Connect();
        const auto& train = t.data().train;
        const int64_t b = c.train.batch_size;
        const auto idx = worker::data::EpochIndices(train.size(), r, workers, 0,
                                                    static_cast<uint64_t>(c.train.seed));
        const int64_t per_epoch = static_cast<int64_t>(idx.size()) / b;
        for (int64_t s = 0; s < o.warmup + o.steps; ++s) {
          const int64_t i = s % per_epoch;
          worker::data::Dataset batch = worker::data::GatherBatch(train, idx, i * b, (i + 1) * b);
          t.Step(batch.images, batch.labels);
        }
        t.Settle();  // cross-barrier: the last step's row completes here
        for (const worker::StepMetrics& m : t.TakeFinished())
          if (m.step >= o.warmup) metrics[r].push_back(m);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  runner.Stop(1.0);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
  std::vector<double> step, compute, encode, network, decode, wait;
  for (const auto& ms : metrics)
    for (const auto& m : ms) {
      step.push_back(m.step_ms);
      compute.push_back(m.compute_ms);
      encode.push_back(m.encode_ms);
      network.push_back(m.network_ms);
      decode.push_back(m.decode_ms);
      wait.push_back(m.wait_ms);
    }
  Row r;
  r.what = "ps:" + c.name;
  r.threads = std::max(1, c.train.threads);
  r.workers = workers;
  r.batch = c.train.batch_size;
  r.step_ms = Median(step);
  r.compute_ms = Median(compute);
  r.encode_ms = Median(encode);
  r.network_ms = Median(network);
  r.decode_ms = Median(decode);
  r.wait_ms = Median(wait);
  return r;
}

void RunTrain(const TrainOptions& o) {
  GP_ENFORCE(o.steps >= 10, "--steps must be at least 10, got ", o.steps);
  GP_ENFORCE(o.warmup >= 0, "--warmup must be >= 0, got ", o.warmup);
  Config c = LoadConfig(o.config, o.overrides);
  spdlog::set_level(spdlog::level::warn);  // the trainers' progress lines are not results
  c.train.log_every = 0;
  const int workers = c.cluster.workers;
  const worker::data::DatasetPair d =
      worker::data::LoadDataset(c.dataset.name, c.dataset.path, c.dataset.subset,
                                c.dataset.test_subset, static_cast<uint64_t>(c.train.seed));
  const int64_t total = c.train.batch_size * workers;
  worker::BlasInfo blas_info = worker::DescribeBlas();
  blas_info.threads = 0;  // each row sets its own (SetComputeThreads)
  const std::string blas = blas_info.ToString();
  std::fprintf(stderr, "train bench: %s, %s, %d workers x batch %lld, %lld steps (+%lld warm-up)\n",
               c.model.c_str(), c.name.c_str(), workers, static_cast<long long>(c.train.batch_size),
               static_cast<long long>(o.steps), static_cast<long long>(o.warmup));
  std::fprintf(stderr, "train bench: BLAS: %s\n", blas.c_str());
  std::vector<Row> rows;
  rows.push_back(SingleProcess(c, d, total, 1, o));
  if (workers > 1) rows.push_back(SingleProcess(c, d, total, workers, o));
  rows.push_back(ParameterServer(c, o));
  const Row& ps = rows.back();
  double best_single = rows[0].step_ms;
  for (const Row& r : rows)
    if (r.what == "single") best_single = std::min(best_single, r.step_ms);
  for (const Row& r : rows) {
    if (o.json) {
      std::printf(
          "{\"what\": %s, \"workers\": %d, \"threads\": %d, \"batch\": %lld, \"step_ms\": %s, "
          "\"compute_ms\": %s, \"encode_ms\": %s, \"network_ms\": %s, \"decode_ms\": %s, "
          "\"wait_ms\": %s, \"ps_over_this\": %s, \"blas\": %s}\n",
          JsonString(r.what).c_str(), r.workers, r.threads, static_cast<long long>(r.batch),
          JsonNumber(r.step_ms).c_str(), JsonNumber(r.compute_ms).c_str(),
          JsonNumber(r.encode_ms).c_str(), JsonNumber(r.network_ms).c_str(),
          JsonNumber(r.decode_ms).c_str(), JsonNumber(r.wait_ms).c_str(),
          JsonNumber(ps.step_ms / r.step_ms).c_str(), JsonString(blas).c_str());
    } else {
      std::printf(
          "%-24s workers %d threads %d batch %4lld  %7.2f ms/step  (compute %.2f encode %.2f "
          "network %.2f decode %.2f wait %.2f)",
          r.what.c_str(), r.workers, r.threads, static_cast<long long>(r.batch), r.step_ms,
          r.compute_ms, r.encode_ms, r.network_ms, r.decode_ms, r.wait_ms);
      if (r.what == "single") std::printf("  ps/this %.2fx", ps.step_ms / r.step_ms);
      std::printf("\n");
    }
  }
  if (!o.json)
    std::printf("parameter server step vs the faster single process: %.2fx\n",
                ps.step_ms / best_single);
}

}  // namespace

void AddTrainCommand(CLI::App& app) {
  auto opt = std::make_shared<TrainOptions>();
  CLI::App* cmd = app.add_subcommand(
      "train",
      "Time per step of a distributed job through the server vs one process training the "
      "same total batch, measured in the same run");
  cmd->add_option("--config", opt->config, "experiment YAML")->capture_default_str();
  cmd->add_option("--set", opt->overrides, "override a config key, e.g. --set train.batch_size=32");
  cmd->add_option("--steps", opt->steps, "timed steps per row (median reported)")
      ->capture_default_str();
  cmd->add_option("--warmup", opt->warmup, "untimed steps first")->capture_default_str();
  cmd->add_flag("--json", opt->json, "one JSON object per row on stdout, nothing else");
  cmd->callback([opt] { RunTrain(*opt); });
}

}  // namespace gradpress::bench
