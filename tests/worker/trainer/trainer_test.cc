// The worker's Trainer against an in-process server on 127.0.0.1:0, workers as threads.
#include "worker/loop/trainer.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/config.h"
#include "server/server_options.h"
#include "tests/server/cluster.h"
#include "tests/worker/trainer/trainer_util.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/loop/lr_schedule.h"
#include "worker/models/model_factory.h"

namespace gradpress::testing {
namespace {

using worker::Trainer;
using worker::TrainerOptions;

std::unique_ptr<Trainer> MakeTrainer(const Config& c, int rank, const Cluster& cluster,
                                     const std::string& run_dir = "", int64_t max_steps = 0) {
  return std::make_unique<Trainer>(TrainerOptionsFor(c, rank, cluster, run_dir, max_steps));
}

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

TEST_CASE("sync gradients, codec none: 2 workers x batch b == 1 process x batch 2b", "[trainer]") {
  const Config c = ParseConfig(R"(
name: equivalence
model: lenet
dataset: {name: synthetic, subset: 1024, test_subset: 128}
device: cpu
train: {epochs: 1, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 7, log_every: 0}
cluster: {workers: 2}
sync: {mode: sync, exchange: gradients}
server: {deadline_s: 30, worker_timeout_s: 30}
)");
  const int64_t b = c.train.batch_size, steps = 20;
  Cluster cluster(server::StoreOptionsFromConfig(c));
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int r = 0; r < 2; ++r) trainers.push_back(MakeTrainer(c, r, cluster));
  Cluster::Parallel(2, [&](int r) { trainers[r]->Connect(); });

  std::vector<torch::Tensor> init;
  for (const auto& p : trainers[0]->Parameters()) init.push_back(p.clone());
  const auto& train = trainers[0]->data().train;
  std::vector<std::vector<int64_t>> idx;
  for (int r = 0; r < 2; ++r) idx.push_back(worker::data::EpochIndices(train.size(), r, 2, 0, 7));
  REQUIRE(static_cast<int64_t>(idx[0].size()) >= steps * b);

  std::vector<std::vector<worker::StepMetrics>> metrics(2);  // Catch asserts in this thread
  Cluster::Parallel(2, [&](int r) {
    for (int64_t s = 0; s < steps; ++s) {
      auto batch = worker::data::GatherBatch(train, idx[r], s * b, (s + 1) * b);
      metrics[r].push_back(trainers[r]->Step(batch.images, batch.labels));
    }
  });
  for (int r = 0; r < 2; ++r) {
    REQUIRE(metrics[r].size() == static_cast<size_t>(steps));
    for (int64_t s = 0; s < steps; ++s) {
      CHECK(metrics[r][s].step == s);
      CHECK(metrics[r][s].bytes_up >= 4 * 61706);  // codec none: dense
    }
  }

  // The reference: one process, the union batch, the same initial weights.
  torch::manual_seed(123);
  auto ref = worker::models::MakeModel("lenet", 1, 28, 10);
  auto ref_params = ref->parameters();
  {
    torch::NoGradGuard g;
    for (size_t i = 0; i < init.size(); ++i) ref_params[i].copy_(init[i]);
  }
  torch::optim::SGD sgd(ref_params, torch::optim::SGDOptions(0.05).momentum(0.9));
  for (int64_t s = 0; s < steps; ++s) {
    auto b0 = worker::data::GatherBatch(train, idx[0], s * b, (s + 1) * b);
    auto b1 = worker::data::GatherBatch(train, idx[1], s * b, (s + 1) * b);
    sgd.zero_grad();
    auto loss = torch::nn::functional::cross_entropy(
        ref->forward(torch::cat({b0.images, b1.images})), torch::cat({b0.labels, b1.labels}));
    loss.backward();
    sgd.step();
  }

  double max_diff = 0, between = 0, moved = 0;
  const auto w0 = trainers[0]->Parameters(), w1 = trainers[1]->Parameters();
  for (size_t i = 0; i < ref_params.size(); ++i) {
    max_diff = std::max(max_diff, (w0[i] - ref_params[i]).abs().max().item<double>());
    max_diff = std::max(max_diff, (w1[i] - ref_params[i]).abs().max().item<double>());
    between = std::max(between, (w0[i] - w1[i]).abs().max().item<double>());
    moved = std::max(moved, (w0[i] - init[i]).abs().max().item<double>());
  }
  WARN("max |w_worker - w_single| = " << max_diff << ", between workers " << between
                                      << ", max |w - w0| = " << moved);
  CHECK(moved > 1e-2);  // training did something
  CHECK(between == 0.0);
  CHECK(max_diff < 1e-4);
}

TEST_CASE("method-5-like run writes metrics.jsonl and summary.json and learns", "[trainer]") {
  const Config c = ParseConfig(R"(
name: trainer-m5-test
model: lenet
dataset: {name: synthetic, subset: 2048, test_subset: 256}
device: cpu
train: {epochs: 1, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 3, log_every: 0}
cluster: {workers: 2}
sync: {mode: sync, exchange: gradients}
push: {codec: topk, ratio: 0.01, then: {codec: qsgd}, error_feedback: true}
pull: {codec: topk, ratio: 0.01, then: {codec: qsgd}, error_feedback: true}
server: {deadline_s: 30, worker_timeout_s: 30}
)");
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("gp_trainer_test_" + std::to_string(getpid())))
          .string();
  std::filesystem::remove_all(dir);
  Cluster cluster(server::StoreOptionsFromConfig(c));
  std::vector<worker::TrainSummary> summaries(2);
  std::vector<std::unique_ptr<Trainer>> trainers(2);
  Cluster::Parallel(2, [&](int r) {
    trainers[r] = MakeTrainer(c, r, cluster, dir);
    summaries[r] = trainers[r]->Run();
  });
  double between = 0;
  const auto w0 = trainers[0]->Parameters(), w1 = trainers[1]->Parameters();
  for (size_t i = 0; i < w0.size(); ++i) {
    between = std::max(between, (w0[i] - w1[i]).abs().max().item<double>());
  }

  const auto& s = summaries[0];
  const double dense = 4.0 * 61706;
  WARN("steps " << s.steps << ", test_acc " << s.test_acc << ", bytes_up/step "
                << s.bytes_up_per_step << " (ratio " << s.ratio_up << "), bytes_down/step "
                << s.bytes_down_per_step << " (ratio " << s.ratio_down << ")");
  CHECK(s.steps == 2048 / 2 / 16);
  CHECK(s.epochs == 1);
  CHECK(s.bytes_up_per_step > 0);
  CHECK(s.bytes_up_per_step < dense / 10);
  CHECK(s.bytes_down_per_step < dense / 10);
  CHECK(s.ratio_up > 10);
  CHECK(s.test_acc > 0.3);
  CHECK(summaries[1].steps == s.steps);
  CHECK(between == 0.0);                               // both workers hold the same weights
  CHECK(summaries[1].test_acc == Approx(s.test_acc));  // same weights on both workers

  const std::string metrics = ReadAll(dir + "/metrics.jsonl");
  for (const char* f : {"\"step\"", "\"loss\"", "\"bytes_up\"", "\"bytes_down\"", "\"compute_ms\"",
                        "\"encode_ms\"", "\"decode_ms\"", "\"network_ms\"", "\"wait_ms\"",
                        "\"train_acc\"", "\"test_acc\"", "\"epoch_s\""})
    CHECK(metrics.find(f) != std::string::npos);
  CHECK(std::count(metrics.begin(), metrics.end(), '\n') == 2 * (s.steps + 1));
  const std::string summary = ReadAll(dir + "/summary.json");
  for (const char* f :
       {"\"name\"", "\"method\"", "\"model\"", "\"dataset\"", "\"workers\"", "\"steps\"",
        "\"epochs\"", "\"test_acc\"", "\"bytes_up_per_step\"", "\"bytes_down_per_step\"",
        "\"ratio_up\"", "\"ratio_down\"", "\"step_ms\"", "\"compute_ms\"", "\"encode_ms\"",
        "\"network_ms\"", "\"decode_ms\"", "\"wait_ms\"", "\"wall_s\""})
    CHECK(summary.find(f) != std::string::npos);
  CHECK(summary.find("\"model\": \"lenet\"") != std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_CASE("async method 1: every push applied once or refused as stale, the model learns",
          "[trainer]") {
  const Config c = ParseConfig(R"(
name: trainer-async-test
model: lenet
dataset: {name: synthetic, subset: 2048, test_subset: 256}
device: cpu
train: {epochs: 2, batch_size: 16, lr: 0.01, momentum: 0.9, seed: 5, log_every: 0}
cluster: {workers: 2}
sync: {mode: async, exchange: weights, max_staleness: 4}
server: {deadline_s: 30, worker_timeout_s: 30}
)");
  Cluster cluster(server::StoreOptionsFromConfig(c));
  std::vector<worker::TrainSummary> summaries(2);
  Cluster::Parallel(2, [&](int r) { summaries[r] = MakeTrainer(c, r, cluster)->Run(); });
  const auto stats = cluster.runner.store().Stats();
  WARN("async: server steps " << stats.steps << ", test_acc " << summaries[0].test_acc << " / "
                              << summaries[1].test_acc << ", wait_ms "
                              << summaries[0].totals.Mean("wait_ms"));
  CHECK(summaries[0].steps == 2 * 2048 / 2 / 16);
  CHECK(summaries[1].steps == summaries[0].steps);
  // Each push applied once, or refused as too stale (and dropped by the trainer).
  uint64_t rejected = 0;
  for (const auto& [reason, n] : stats.rejected) {
    CHECK(reason == "stale_or_out_of_order");
    rejected += n;
  }
  CHECK(stats.steps + static_cast<int64_t>(rejected) == summaries[0].steps + summaries[1].steps);
  CHECK(rejected < 32);
  CHECK(summaries[0].test_acc > 0.3);
  CHECK(summaries[1].test_acc > 0.3);
}

TEST_CASE("method 1's server SGD follows the lr schedule: same weights as method 3", "[trainer]") {
  // Both take SGD steps (momentum, PyTorch semantics) on the mean gradient with the lr of
  // train.lr_schedule: on the server (exchange weights) or on each worker (gradients).
  // 24 steps cross the epoch boundary at 16 where the step schedule divides the lr by 10.
  auto run = [](const std::string& exchange) {
    const Config c = ParseConfig(R"(
name: lr-schedule-test
model: lenet
dataset: {name: synthetic, subset: 512, test_subset: 64}
device: cpu
train: {epochs: 2, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 9, log_every: 0,
        lr_schedule: step, lr_step_epochs: 1, lr_gamma: 0.1, warmup_epochs: 0.25}
cluster: {workers: 2}
server: {deadline_s: 30, worker_timeout_s: 30}
sync: {mode: sync, exchange: )" + exchange +
                                 "}");
    Cluster cluster(server::StoreOptionsFromConfig(c));
    std::vector<std::vector<torch::Tensor>> w(2);
    Cluster::Parallel(2, [&](int r) {
      auto t = MakeTrainer(c, r, cluster, "", 24);
      t->Run();
      w[r] = t->Parameters();
    });
    return w[0];
  };
  const auto m1 = run("weights"), m3 = run("gradients");
  double d = 0;
  for (size_t i = 0; i < m1.size(); ++i)
    d = std::max(d, (m1[i] - m3[i]).abs().max().item<double>());
  WARN("max |w_m1 - w_m3| after 24 steps = " << d);
  CHECK(d < 1e-5);
}

TEST_CASE("async with exchanged gradients is refused at load time, and by the trainer",
          "[trainer]") {
  CHECK_THROWS_WITH(ParseConfig("{sync: {mode: async, exchange: gradients}}"),
                    Catch::Contains("needs sync.exchange: weights"));
  TrainerOptions o;  // a config built in code gets the same check
  o.config = ParseConfig("{device: cpu, dataset: {name: synthetic, subset: 64, test_subset: 16}}");
  o.config.sync.mode = "async";
  CHECK_THROWS_WITH(Trainer(o), Catch::Contains("needs sync.exchange: weights"));
}

TEST_CASE("lr schedules: warm-up, step and cosine", "[trainer]") {
  TrainConfig t;
  t.lr = 0.1;
  t.epochs = 10;
  CHECK(worker::ScheduledLr(t, 3.5) == Approx(0.1));
  t.warmup_epochs = 1;
  CHECK(worker::ScheduledLr(t, 0.5) == Approx(0.05));
  t.lr_schedule = "step";
  t.lr_step_epochs = 3;
  CHECK(worker::ScheduledLr(t, 2.9) == Approx(0.1));
  CHECK(worker::ScheduledLr(t, 6.0) == Approx(0.001));
  t.lr_schedule = "cosine";
  CHECK(worker::ScheduledLr(t, 1.0) == Approx(0.1));
  CHECK(worker::ScheduledLr(t, 5.5) == Approx(0.05));
  CHECK(worker::ScheduledLr(t, 10.0) == Approx(0.0).margin(1e-12));
  t.lr_schedule = "linear";
  CHECK_THROWS_AS(worker::ScheduledLr(t, 2.0), InvalidArgument);
}

}  // namespace
}  // namespace gradpress::testing
