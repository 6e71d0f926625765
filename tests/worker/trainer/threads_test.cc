// The worker's threads are long-lived: a sharded call fans out on the client's threads, not a
// thread per shard per call, and Trainer::Run loads the next batch on one thread, not a
// thread per step. Counted as threads created (tests/thread_count.h) over many steps.
#include "common/config.h"
#include "server/server_options.h"
#include "tests/catch_torch.h"
#include "tests/server/cluster.h"
#include "tests/thread_count.h"
#include "tests/worker/trainer/trainer_util.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/loop/trainer.h"

namespace gradpress::testing {
namespace {

using worker::Trainer;

Config OneWorker(const std::string& extra) {
  return ParseConfig(R"(
name: threads
model: lenet
dataset: {name: synthetic, subset: 2048, test_subset: 64}
device: cpu
train: {epochs: 1, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 11, log_every: 0}
cluster: {workers: 1}
server: {deadline_s: 30, worker_timeout_s: 30}
sync: {exchange: gradients}
)" + extra);
}

TEST_CASE("sharded calls reuse the client's threads: none is created per call", "[shards]") {
  REQUIRE(ThreadsAreCounted());
  Config c = OneWorker("");
  std::vector<std::unique_ptr<Cluster>> clusters;
  for (int s = 0; s < 3; ++s) {
    server::StoreOptions so = server::StoreOptionsFromConfig(c);
    so.shard = s;
    so.shards = 3;
    clusters.push_back(std::make_unique<Cluster>(so));
    c.cluster.servers.push_back("127.0.0.1:" + std::to_string(clusters.back()->port));
  }
  Trainer t(TrainerOptionsFor(c, 0, *clusters[0]));
  t.Connect();
  const auto& train = t.data().train;
  const int64_t b = c.train.batch_size;
  const auto idx = worker::data::EpochIndices(train.size(), 0, 1, 0, c.train.seed);
  auto steps = [&](int64_t from, int64_t to) {
    for (int64_t s = from; s < to; ++s) {
      auto batch = worker::data::GatherBatch(train, idx, s * b, (s + 1) * b);
      t.Step(batch.images, batch.labels);
    }
  };
  steps(0, 5);  // warm: the exchange's, LibTorch's and the servers' threads exist now
  const int64_t before = ThreadsCreated();
  steps(5, 45);  // 40 steps, each at least one call to 3 shards (80 threads before pools)
  const int64_t created = ThreadsCreated() - before;
  INFO("threads created over 40 sharded steps: " << created);
  CHECK(created <= 10);
}

TEST_CASE("Trainer::Run prefetches on one thread: none is created per step", "[trainer]") {
  // Threads created by a Run of 4 steps and by one of 64 (fresh trainers, one server each).
  auto created_by_run = [](int64_t steps) {
    const Config c = OneWorker("");
    Cluster cluster(server::StoreOptionsFromConfig(c));
    Trainer t(TrainerOptionsFor(c, 0, cluster, "", steps));
    const int64_t before = ThreadsCreated();
    (void)t.Run();
    return ThreadsCreated() - before;
  };
  REQUIRE(ThreadsAreCounted());
  created_by_run(4);  // warm LibTorch's pools
  const int64_t few = created_by_run(4), many = created_by_run(64);
  INFO("threads created: " << few << " by 4 steps, " << many << " by 64 steps");
  CHECK(many <= few + 6);
}

}  // namespace
}  // namespace gradpress::testing
