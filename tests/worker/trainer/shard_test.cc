// Sharded servers (cluster.servers, worker/client/sharded_ps_client.h): two workers against 1 and 2
// gradpress servers in process give the same weights for methods 1, 3 and 5 (same seeds), with
// parts of cut tensors (cluster.partition_mb) as keys of their own; a shard refuses a worker
// that names another shard or another placement.
#include <map>

#include "common/config.h"
#include "server/server_options.h"
#include "tests/catch_torch.h"
#include "tests/server/cluster.h"
#include "tests/worker/trainer/trainer_util.h"
#include "worker/client/sharded_ps_client.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/loop/trainer.h"

namespace gradpress::testing {
namespace {

using worker::Trainer;

struct ShardRun {
  std::vector<torch::Tensor> weights;  // worker 0's after the steps
  std::vector<int64_t> keys_per_shard;
  std::map<std::string, std::vector<int64_t>> shapes;  // every shard's keys
  uint64_t bytes_up = 0;  // worker 0's, all steps (Trainer::Run: its summary's, per step)
};

// Two workers, `shards` servers (shard i at cluster i), `steps` steps (0: Trainer::Run, the
// whole job with its epochs, evaluations and method 6's elections).
ShardRun Run(Config c, int shards, int64_t steps) {
  std::vector<std::unique_ptr<Cluster>> clusters;
  c.cluster.servers.clear();
  for (int s = 0; s < shards; ++s) {
    server::StoreOptions so = server::StoreOptionsFromConfig(c);
    so.shard = s;
    so.shards = shards;
    clusters.push_back(std::make_unique<Cluster>(so));
    c.cluster.servers.push_back("127.0.0.1:" + std::to_string(clusters.back()->port));
  }
  if (shards == 1) c.cluster.servers.clear();  // the plain one-server path
  std::vector<std::unique_ptr<Trainer>> trainers;
  for (int r = 0; r < 2; ++r)
    trainers.push_back(std::make_unique<Trainer>(TrainerOptionsFor(c, r, *clusters[0])));
  Cluster::Parallel(2, [&](int r) { trainers[r]->Connect(); });
  const auto& train = trainers[0]->data().train;
  const int64_t b = c.train.batch_size;
  std::vector<worker::TrainSummary> summary(2);
  Cluster::Parallel(2, [&](int r) {
    if (steps == 0) return static_cast<void>(summary[r] = trainers[r]->Run());
    const auto idx = worker::data::EpochIndices(train.size(), r, 2, 0, c.train.seed);
    for (int64_t s = 0; s < steps; ++s) {
      auto batch = worker::data::GatherBatch(train, idx, s * b, (s + 1) * b);
      trainers[r]->Step(batch.images, batch.labels);
    }
  });
  ShardRun out;
  for (const auto& p : trainers[0]->Parameters()) out.weights.push_back(p.clone());
  for (const auto& m : trainers[0]->TakeFinished()) out.bytes_up += m.bytes_up;
  if (steps == 0) out.bytes_up = static_cast<uint64_t>(summary[0].bytes_up_per_step);
  for (const auto& cl : clusters) {
    out.keys_per_shard.push_back(static_cast<int64_t>(cl->runner.store().model().size()));
    for (const auto& spec : cl->runner.store().model()) out.shapes[spec.key] = spec.shape;
  }
  return out;
}

Config ShardConfig(const std::string& method) {
  // partition_mb 0.05 cuts LeNet's fc1 (48,000 floats, 0.18 MiB) into 4 parts.
  return ParseConfig(R"(
name: shards
model: lenet
dataset: {name: synthetic, subset: 1024, test_subset: 64}
device: cpu
train: {epochs: 1, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 11, log_every: 0}
cluster: {workers: 2, partition_mb: 0.05}
server: {deadline_s: 30, worker_timeout_s: 30}
compress: {min_numel: 100}
)" + method);
}

}  // namespace

TEST_CASE("2 shards give the same weights as 1 shard (methods 1, 3, 5)", "[shards]") {
  const std::string topk = "{codec: topk, ratio: 0.05, then: {codec: qsgd}, error_feedback: true}";
  const std::vector<std::pair<std::string, std::string>> methods{
      {"method 1", "sync: {exchange: weights}\n"},
      {"method 3", "sync: {exchange: gradients}\n"},
      {"method 5", "sync: {exchange: gradients}\npush: " + topk + "\npull: " + topk + "\n"},
  };
  for (const auto& [name, method] : methods) {
    SECTION(name) {
      const Config c = ShardConfig(method);
      const ShardRun one = Run(c, 1, 10), two = Run(c, 2, 10);
      CHECK(MaxDiff(one.weights, two.weights) == 0.0);
      CHECK(one.bytes_up == two.bytes_up);
      double moved = 0;
      for (const auto& w : one.weights) moved = std::max(moved, w.abs().max().item<double>());
      CHECK(moved > 0);
      // LeNet's 10 tensors, fc1 in 4 parts: 13 keys, on one server or spread over two.
      REQUIRE(two.keys_per_shard.size() == 2);
      CHECK(one.keys_per_shard == std::vector<int64_t>{13});
      CHECK(two.keys_per_shard[0] + two.keys_per_shard[1] == 13);
      CHECK(two.keys_per_shard[0] > 0);
      CHECK(two.keys_per_shard[1] > 0);
    }
  }
}

TEST_CASE(
    "method 6 (elections on shard 0, weights published to every shard) and async mode "
    "run on 2 shards",
    "[shards]") {
  // Method 6: 2 epochs of 8 steps, sync every 4, the best worker's weights each epoch.
  Config m6 = ShardConfig(R"(sync: {exchange: gradients, every: 4, model_selection: best}
push: {codec: topk, ratio: 0.05, then: {codec: qsgd}, error_feedback: true}
pull: {codec: topk, ratio: 0.05, then: {codec: qsgd}, error_feedback: true}
)");
  m6.dataset.subset = 256;
  m6.train.epochs = 2;
  const ShardRun one = Run(m6, 1, 0), two = Run(m6, 2, 0);
  CHECK(MaxDiff(one.weights, two.weights) == 0.0);
  CHECK(one.bytes_up == two.bytes_up);
  // Async: pushes apply in arrival order, so no exact reference; the job trains through both.
  Config async = ShardConfig("sync: {mode: async, exchange: weights}\n");
  async.dataset.subset = 256;
  async.train.epochs = 1;
  const ShardRun a = Run(async, 2, 0);
  double moved = 0;
  for (size_t i = 0; i < a.weights.size(); ++i)
    moved = std::max(moved, (a.weights[i] - one.weights[i]).abs().max().item<double>());
  CHECK(moved > 0);
  CHECK(a.bytes_up > 0);
}

TEST_CASE("a cut tensor's parts keep its other dimensions and stay compressed", "[shards]") {
  // skip_1d sends 1-D tensors uncompressed: parts of fc1 [120, 400] must stay 2-D ([30, 400]),
  // so cutting changes the bytes only as much as top-k per part does.
  const std::string topk = "{codec: topk, ratio: 0.05, then: {codec: qsgd}, error_feedback: true}";
  Config c = ShardConfig("sync: {exchange: gradients}\npush: " + topk + "\npull: " + topk + "\n");
  c.compress.skip_1d = true;
  const ShardRun cut = Run(c, 2, 3);
  c.cluster.partition_mb = 0;  // no cutting: fc1 whole
  const ShardRun whole = Run(c, 1, 3);
  CHECK(cut.shapes.at("fc1.weight#0") == std::vector<int64_t>{30, 400});
  CHECK(cut.shapes.at("fc1.weight#3") == std::vector<int64_t>{30, 400});
  CHECK(whole.shapes.at("fc1.weight") == std::vector<int64_t>{120, 400});
  CHECK(cut.bytes_up < 2 * whole.bytes_up);
  CHECK(whole.bytes_up < 2 * cut.bytes_up);
}

TEST_CASE("compress.auto's choice reaches every part of a cut tensor on every shard",
          "[shards][auto]") {
  // 2 shards, fc1 cut into 4 parts. For a 10 Tbit/s link every key is chosen uncompressed:
  // every part of fc1 must then push its dense floats, 4 bytes each; for 100 kbit/s top-k.
  const std::string topk = "{codec: topk, ratio: 0.01, error_feedback: true}";
  Config c = ShardConfig("sync: {exchange: gradients}\npush: " + topk + "\npull: " + topk + "\n");
  c.compress.auto_select = true;
  c.compress.topology = "links";
  c.compress.link_gbps = 10000;
  const ShardRun fast = Run(c, 2, 3);
  c.compress.link_gbps = 0.0001;
  const ShardRun slow = Run(c, 2, 3);
  int64_t floats = 0;
  for (const auto& w : fast.weights) floats += w.numel();
  CHECK(fast.shapes.count("fc1.weight#3") == 1);
  CHECK(fast.bytes_up == static_cast<uint64_t>(3 * 4 * floats));
  CHECK(10 * slow.bytes_up < fast.bytes_up);
}

TEST_CASE("a shard refuses a worker for another shard or with another placement", "[shards]") {
  server::StoreOptions so;
  so.workers = 2;
  so.shard = 1;
  so.shards = 2;
  Cluster cluster(so);
  const std::vector<TensorSpec> model{{"w", {4}}};
  auto options = [&](int shard, int shards, uint64_t hash) {
    worker::ClientOptions o = cluster.Client(0);
    o.shard = shard;
    o.shards = shards;
    o.placement_hash = hash;
    return o;
  };
  {
    worker::GrpcPsClient wrong_shard(options(0, 2, 7));
    CHECK_THROWS_WITH(wrong_shard.Register(model), Catch::Contains("this server is shard 1 of 2"));
    worker::GrpcPsClient wrong_count(options(1, 3, 7));
    CHECK_THROWS_WITH(wrong_count.Register(model), Catch::Contains("shard 1 of 3"));
  }
  worker::GrpcPsClient first(options(1, 2, 7));
  first.Register(model);
  worker::ClientOptions o = options(1, 2, 8);
  o.worker_id = "worker-1";
  worker::GrpcPsClient other(o);
  try {
    other.Register(model);
    FAIL("a different placement was accepted");
  } catch (const FailedPrecondition& e) {
    CHECK(e.reason() == Reason::kConfigMismatch);
    CHECK_THAT(e.message(), Catch::Contains("places the model's partitions differently"));
  }
}

TEST_CASE("the sharded client is used for several servers or a cut tensor", "[shards]") {
  const std::vector<torch::Tensor> small{torch::zeros({1000})}, big{torch::zeros({300000})};
  CHECK_FALSE(worker::ShardedPsClient::Needed(small, 1, 1.0));
  CHECK(worker::ShardedPsClient::Needed(small, 2, 1.0));
  CHECK(worker::ShardedPsClient::Needed(big, 1, 1.0));  // 1.14 MiB > 1 MiB
  CHECK_FALSE(worker::ShardedPsClient::Needed(big, 1, 0));
}

}  // namespace gradpress::testing
