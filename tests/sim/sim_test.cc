// gradpress-sim against the real thing: the Simulator's weights after 20 steps (N Trainers on
// in-process clients) equal those of 2 worker::Trainer threads against an in-process gRPC
// server (tests/server/cluster.h).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/config.h"
#include "server/server_options.h"
#include "sim/simulator.h"
#include "tests/server/cluster.h"
#include "worker/loop/trainer.h"
#include "worker/models/net.h"

namespace gradpress::testing {
namespace {

// 320 examples, 2 workers, batch 16: 10 steps per epoch, 2 epochs = 20 steps; a cosine lr.
const char* kBase = R"(
name: sim-equivalence
model: lenet
dataset: {name: synthetic, subset: 320, test_subset: 128}
device: cpu
train: {epochs: 2, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 7, log_every: 0,
        lr_schedule: cosine}
cluster: {workers: 2}
sync: {mode: sync, exchange: gradients}
server: {deadline_s: 30, worker_timeout_s: 30, stats_every: 0}
)";

struct Outcome {
  std::vector<std::vector<torch::Tensor>> weights;  // per rank
  std::vector<std::vector<torch::Tensor>> buffers;  // per rank: BatchNorm statistics
  worker::TrainSummary summary;                     // rank 0's
};

Outcome RunDistributed(const Config& c) {
  Cluster cluster(server::StoreOptionsFromConfig(c));
  std::vector<std::unique_ptr<worker::Trainer>> trainers;
  for (int r = 0; r < c.cluster.workers; ++r) {
    worker::TrainerOptions o;
    o.config = c;
    o.rank = r;
    o.workers = c.cluster.workers;
    o.server = "127.0.0.1:" + std::to_string(cluster.port);
    trainers.push_back(std::make_unique<worker::Trainer>(o));
  }
  std::vector<worker::TrainSummary> summaries(trainers.size());
  Cluster::Parallel(c.cluster.workers, [&](int r) { summaries[r] = trainers[r]->Run(); });
  Outcome out;
  for (auto& t : trainers) {
    out.weights.emplace_back();
    for (const auto& p : t->Parameters()) out.weights.back().push_back(p.clone());
    out.buffers.emplace_back();
    for (const auto& b : worker::models::BufferTensors(t->model()))
      out.buffers.back().push_back(b.clone());
  }
  out.summary = summaries[0];
  return out;
}

Outcome RunSim(const Config& c, const std::string& run_dir = "") {
  sim::SimOptions o;
  o.config = c;
  o.workers = c.cluster.workers;
  o.run_dir = run_dir;
  sim::Simulator s(o);
  Outcome out;
  out.summary = s.Run();
  for (int r = 0; r < s.workers(); ++r) {
    out.weights.emplace_back();
    for (const auto& p : s.Parameters(r)) out.weights.back().push_back(p.clone());
    out.buffers.emplace_back();
    for (const auto& b : s.Buffers(r)) out.buffers.back().push_back(b.clone());
  }
  return out;
}

double MaxDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i)
    d = std::max(d, (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).abs().max().item<double>());
  return d;
}

// Compares sim and distributed runs of `c`: weights of every rank, bytes and accuracy.
void ExpectSame(const Config& c, double tolerance) {
  const Outcome real = RunDistributed(c);
  const Outcome simulated = RunSim(c);
  REQUIRE(real.summary.steps == 20);
  REQUIRE(simulated.summary.steps == 20);
  double diff = 0, buffers = 0;
  for (int r = 0; r < c.cluster.workers; ++r) {
    diff = std::max(diff, MaxDiff(real.weights[r], simulated.weights[r]));
    buffers = std::max(buffers, MaxDiff(real.buffers[r], simulated.buffers[r]));
  }
  // Training moved the weights, so equality is not trivial.
  Config untrained = c;
  untrained.train.epochs = 0;
  const double moved = MaxDiff(real.weights[0], RunSim(untrained).weights[0]);
  WARN(c.name << ": max |w_sim - w_distributed| = " << diff << ", BatchNorm statistics " << buffers
              << " (" << real.buffers[0].size() << " tensors), weights moved by " << moved
              << "; bytes up/step " << simulated.summary.bytes_up_per_step << " vs "
              << real.summary.bytes_up_per_step << ", down "
              << simulated.summary.bytes_down_per_step << " vs " << real.summary.bytes_down_per_step
              << ", test_acc " << simulated.summary.test_acc << " vs " << real.summary.test_acc);
  CHECK(moved > 1e-2);
  CHECK(diff <= tolerance);
  CHECK(buffers <= tolerance);
  CHECK(simulated.summary.bytes_up_per_step == real.summary.bytes_up_per_step);
  CHECK(simulated.summary.bytes_down_per_step == real.summary.bytes_down_per_step);
  CHECK(simulated.summary.test_acc == real.summary.test_acc);
  CHECK(simulated.summary.epochs == real.summary.epochs);
}

TEST_CASE("sim equals distributed: sync, gradients, codec none, 2 workers, 20 steps", "[sim]") {
  ExpectSame(ParseConfig(kBase), 1e-5);
}

TEST_CASE("sim equals distributed: topk+qsgd with error feedback both ways (method 5)", "[sim]") {
  const Config c = ParseConfig(
      kBase, "<config>",
      {"name=sim-equivalence-m5", "compress.min_numel=100",
       "push={codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}",
       "pull={codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}"});
  ExpectSame(c, 1e-5);
}

TEST_CASE("sim equals distributed: weights exchange, qsgd push (method 2)", "[sim]") {
  const Config c = ParseConfig(
      kBase, "<config>",
      {"name=sim-equivalence-m2", "sync.exchange=weights", "push={codec: qsgd, levels: 16}"});
  ExpectSame(c, 1e-5);
}

TEST_CASE("sim equals distributed: periodic sync every 4 steps, averaging (method 6)", "[sim]") {
  const Config c = ParseConfig(
      kBase, "<config>",
      {"name=sim-equivalence-m6", "sync.every=4", "sync.model_selection=average",
       "push={codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}",
       "pull={codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}"});
  ExpectSame(c, 1e-5);
}

TEST_CASE("sim equals distributed: BatchNorm statistics stay per worker (resnet20)", "[sim]") {
  // Each worker's running statistics see only its own batches; rank 0's evaluate.
  const Config c = ParseConfig(kBase, "<config>", {"name=sim-equivalence-bn", "model=resnet20"});
  ExpectSame(c, 1e-5);
}

TEST_CASE("sim method 6, best worker each epoch: all workers adopt one model", "[sim]") {
  sim::SimOptions o;
  o.config = ParseConfig(kBase, "<config>", {"sync.every=4", "sync.model_selection=best"});
  o.workers = 3;
  sim::Simulator s(o);
  const worker::TrainSummary summary = s.Run();
  CHECK(summary.steps == 7 * 2);  // 320 / 3 = 106 per worker: 7 steps of 16, one short
  for (int r = 1; r < 3; ++r) CHECK(MaxDiff(s.Parameters(0), s.Parameters(r)) == 0.0);
  double best = 0;
  for (int r = 0; r < 3; ++r) best = std::max(best, s.Evaluate(r));
  CHECK(summary.test_acc == best);
}

TEST_CASE("sim writes metrics.jsonl and summary.json with the worker's field names", "[sim]") {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gp-sim-test-" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(dir);
  Config c = ParseConfig(kBase);
  c.cluster.workers = 3;
  c.train.epochs = 1;
  const Outcome o = RunSim(c, dir);
  std::ifstream f(dir + "/summary.json");
  std::stringstream summary;
  summary << f.rdbuf();
  for (const char* k :
       {"name", "method", "model", "dataset", "workers", "steps", "epochs", "test_acc",
        "bytes_up_per_step", "bytes_down_per_step", "ratio_up", "ratio_down", "step_ms",
        "compute_ms", "encode_ms", "network_ms", "decode_ms", "wait_ms", "wall_s"})
    CHECK(summary.str().find(std::string("\"") + k + "\"") != std::string::npos);
  CHECK(summary.str().find("\"workers\": 3") != std::string::npos);
  std::ifstream m(dir + "/metrics.jsonl");
  std::string line;
  int steps = 0, epochs = 0;
  while (std::getline(m, line)) {
    if (line.find("\"loss\"") != std::string::npos) ++steps;
    if (line.find("\"test_acc\"") != std::string::npos) ++epochs;
  }
  // 320 / 3 = 106 per worker, batch 16: 7 steps, a line per worker each; an epoch line each.
  CHECK(steps == 3 * 7);
  CHECK(epochs == 3);
  CHECK(o.summary.steps == 7);
  CHECK(o.summary.ratio_up == Approx(1.0).epsilon(1e-6));
  std::filesystem::remove_all(dir);
}

TEST_CASE("sim runs what the cluster runs: async, DGC, gaussian, dynamic compression", "[sim]") {
  // The sim is N Trainers on in-process clients: nothing is refused that a cluster runs.
  const std::vector<std::vector<std::string>> configs = {
      {"sync.mode=async", "sync.exchange=weights"},
      {"compress.momentum_correction=0.9", "push.codec=topk", "push.ratio=0.05",
       "push.error_feedback=false", "compress.clip_norm=5"},
      {"sync.exchange=gaussian"},
      {"compress.dynamic.ladder=topk ratio=0.01 | topk ratio=0.1"},
  };
  for (const auto& overrides : configs) {
    sim::SimOptions o;
    o.config = ParseConfig(kBase, "<config>", overrides);
    o.max_steps = 4;
    sim::Simulator s(o);
    const worker::TrainSummary summary = s.Run();
    INFO(overrides.front());
    CHECK(summary.steps == 4);
    CHECK(summary.bytes_up_per_step > 0);
    CHECK(summary.bytes_down_per_step > 0);
  }
}

}  // namespace
}  // namespace gradpress::testing
