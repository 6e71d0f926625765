// The pipelined step (sync.overlap, worker/engine/bucket_scheduler.h) against the serial step: the
// same seeds give bit-identical weights after 20 steps for methods 1, 3, 4 and 5, with the
// model split into several buckets that the server completes one by one.
#include "common/config.h"
#include "server/server_options.h"
#include "tests/catch_torch.h"
#include "tests/server/cluster.h"
#include "tests/worker/trainer/trainer_util.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/engine/bucket_scheduler.h"
#include "worker/loop/trainer.h"

namespace gradpress::testing {
namespace {

using worker::Trainer;

struct RunResult {
  std::vector<torch::Tensor> weights;  // worker 0's, after the steps
  std::vector<std::vector<worker::StepMetrics>> metrics;
  int server_buckets = 0;
};

// Two workers as threads, `steps` steps on their shards of a synthetic set.
// stray: after each step, a backward through every parameter outside the step (as an
// evaluation's probe might run): the exchange must not take its gradients.
RunResult Run(Config c, bool overlap, int64_t steps, bool cross_barrier = true,
              bool stray = false) {
  c.sync.overlap = overlap;
  c.sync.cross_barrier = cross_barrier;
  Cluster cluster(server::StoreOptionsFromConfig(c));
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int r = 0; r < 2; ++r)
    trainers.push_back(std::make_unique<Trainer>(TrainerOptionsFor(c, r, cluster)));
  Cluster::Parallel(2, [&](int r) { trainers[r]->Connect(); });
  const auto& train = trainers[0]->data().train;
  const int64_t b = c.train.batch_size;
  RunResult out;
  out.metrics.resize(2);
  Cluster::Parallel(2, [&](int r) {
    const auto idx = worker::data::EpochIndices(train.size(), r, 2, 0, c.train.seed);
    for (int64_t s = 0; s < steps; ++s) {
      auto batch = worker::data::GatherBatch(train, idx, s * b, (s + 1) * b);
      trainers[r]->Step(batch.images, batch.labels);
      if (stray) {
        torch::Tensor probe = torch::zeros({});
        for (const auto& p : trainers[r]->model().parameters()) probe = probe + p.square().sum();
        probe.backward();
      }
    }
    trainers[r]->Settle();
    out.metrics[r] = trainers[r]->TakeFinished();
  });
  for (const auto& p : trainers[0]->Parameters()) out.weights.push_back(p.clone());
  out.server_buckets = cluster.runner.store().buckets();
  return out;
}

Config MethodConfig(const std::string& exchange, const std::string& codecs,
                    const std::string& model = "lenet", double bucket_mb = 0.02) {
  return ParseConfig(R"(
name: overlap
model: )" + model + R"(
dataset: {name: synthetic, subset: 1024, test_subset: 64}
device: cpu
train: {epochs: 1, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 11, log_every: 0}
cluster: {workers: 2}
sync: {mode: sync, exchange: )" +
                     exchange + ", bucket_mb: " + std::to_string(bucket_mb) + R"(}
server: {deadline_s: 30, worker_timeout_s: 30}
)" + codecs);
}

}  // namespace

TEST_CASE("buckets: reverse parameter order, whole keys, about bucket_mb each", "[overlap]") {
  std::vector<torch::Tensor> params{torch::zeros({1000}), torch::zeros({10}),
                                    torch::zeros({300000}), torch::zeros({20}),
                                    torch::zeros({2000})};
  // From the last key: 2000+20 floats < 1 MiB... so keys 3-4 join key 2 (1.2 MB >= 1 MiB);
  // keys 0-1 are what is left.
  CHECK(worker::BucketScheduler::Split(params, 1.0) == std::vector<int>{2, 3});
  CHECK(worker::BucketScheduler::Split(params, 1e-6) == std::vector<int>{1, 1, 1, 1, 1});
  CHECK(worker::BucketScheduler::Split(params, 100.0) == std::vector<int>{5});
  CHECK_THROWS_AS(worker::BucketScheduler::Split(params, 0.0), InvalidArgument);
}

uint64_t BytesUp(const RunResult& r) {
  uint64_t up = 0;
  for (const auto& m : r.metrics[0]) up += m.bytes_up;
  return up;
}

TEST_CASE(
    "overlap on (with and without cross-barrier) and off give bit-identical weights after 20 "
    "steps (methods 1, 3, 4, 5)",
    "[overlap]") {
  const std::string qsgd = "{codec: qsgd, levels: 16}";
  const std::string topk = "{codec: topk, ratio: 0.05, then: {codec: qsgd}, error_feedback: true}";
  const std::vector<std::pair<std::string, Config>> methods{
      {"method 1", MethodConfig("weights", "")},
      {"method 3", MethodConfig("gradients", "")},
      {"method 4", MethodConfig("gradients", "push: " + qsgd + "\npull: " + qsgd + "\n")},
      {"method 5", MethodConfig("gradients", "push: " + topk + "\npull: " + topk + "\n")},
  };
  for (const auto& [name, c] : methods) {
    SECTION(name) {
      const RunResult cross = Run(c, true, 20), on = Run(c, true, 20, /*cross_barrier=*/false),
                      off = Run(c, false, 20);
      CHECK(on.server_buckets > 2);  // LeNet at 0.02 MiB: several buckets
      CHECK(cross.server_buckets == on.server_buckets);
      CHECK(off.server_buckets == 1);
      CHECK(MaxDiff(on.weights, off.weights) == 0.0);
      CHECK(MaxDiff(cross.weights, off.weights) == 0.0);
      double moved = 0;
      for (const auto& w : off.weights) moved = std::max(moved, w.abs().max().item<double>());
      CHECK(moved > 0);
      // Every step has its whole row, in order, whichever step ran.
      for (const RunResult* r : {&cross, &on, &off}) {
        REQUIRE(r->metrics[0].size() == 20);
        for (size_t s = 0; s < 20; ++s) {
          CHECK(r->metrics[0][s].step == static_cast<int64_t>(s));
          CHECK(r->metrics[0][s].bytes_up > 0);
          CHECK(r->metrics[0][s].bytes_down > 0);
          CHECK(r->metrics[0][s].exposed_comm_ms >= 0);
          CHECK(r->metrics[0][s].overlap == (r != &off));
        }
      }
      // Same bytes on the wire: the split changes where they go, not what they are.
      CHECK(BytesUp(on) == BytesUp(off));
      CHECK(BytesUp(cross) == BytesUp(off));
    }
  }
}

TEST_CASE("a backward between pipelined steps does not reach their buckets", "[overlap]") {
  const Config c = MethodConfig("gradients", "");
  const RunResult off = Run(c, false, 6);
  for (const bool cross_barrier : {false, true}) {
    const RunResult stray = Run(c, true, 6, cross_barrier, /*stray=*/true);
    CHECK(stray.server_buckets > 2);
    CHECK(MaxDiff(stray.weights, off.weights) == 0.0);
  }
}

TEST_CASE("cross-barrier gives the serial step's weights on a ResNet-20 (blocks gate as one)",
          "[overlap]") {
  const Config c = MethodConfig("gradients", "", "resnet20", 0.05);
  const RunResult cross = Run(c, true, 4), off = Run(c, false, 4);
  CHECK(cross.server_buckets > 2);
  CHECK(MaxDiff(cross.weights, off.weights) == 0.0);
  CHECK(BytesUp(cross) == BytesUp(off));
}

}  // namespace gradpress::testing
