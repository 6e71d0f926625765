// Eight workers against one server, every path at once: PushPull and Push + Pull, Stats and
// Heartbeat from a side thread, a worker that leaves mid-run, checkpoints written meanwhile.
// scripts/tsan.sh runs these under ThreadSanitizer; the results are checked exactly, so the
// tests mean something in the normal build too. Assertions run on the main thread only
// (Catch2's are not thread-safe): worker threads record what they saw.
#include <stdlib.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "common/checkpoint.h"
#include "tests/server/cluster.h"
#include "tests/temp_dir.h"

namespace gradpress::testing {
namespace {

constexpr int kWorkers = 8;
// ThreadSanitizer (scripts/tsan.sh) slows gRPC down 20x and more on a busy 2-core machine:
// waits are longer and runs shorter there.
#if defined(__SANITIZE_THREAD__)
constexpr double kSlow = 4, kWorkerTimeout = 45;
constexpr int64_t kSteps = 12, kCheckpointEvery = 4;
#else
constexpr double kSlow = 1, kWorkerTimeout = 5;
constexpr int64_t kSteps = 30, kCheckpointEvery = 5;
#endif

using testing::TempDir;

server::StoreOptions Options(const std::string& ckpt_dir) {
  server::StoreOptions o;
  o.workers = kWorkers;
  o.threads = 2;
  o.stats_every = 10;
  // The leaver waits this long to be dropped; the others (heartbeats from the Poller) must
  // never look silent, even under ThreadSanitizer on a busy 2-core machine.
  o.worker_timeout_s = kWorkerTimeout;
  o.checkpoint_dir = ckpt_dir;
  o.checkpoint_every = kCheckpointEvery;  // divides kSteps and kWorkers * kSteps
  return o;
}

// Heartbeat (for the named workers) and Stats calls on their own channel until Stop().
class Poller {
 public:
  Poller(int port, std::vector<std::string> names) : names_(std::move(names)) {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    stub_ = proto::ParameterServer::NewStub(channel);
    thread_ = std::thread([this] { Run(); });
  }
  ~Poller() { Stop(); }
  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  // Read after Stop().
  int stats_calls = 0, heartbeats = 0;
  bool steps_went_down = false;  // a Stats reply counted fewer steps than an earlier one

 private:
  void Run() {
    int64_t last_steps = 0;
    int live = 0;
    for (;;) {
      grpc::ClientContext ctx;
      ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
      proto::StatsReply reply;
      if (stub_->Stats(&ctx, proto::StatsRequest(), &reply).ok()) {
        ++stats_calls;
        steps_went_down |= reply.steps() < last_steps;
        last_steps = reply.steps();
        live = reply.live_workers();
      }
      // Heartbeats once the workers have registered: before, each would be a NOT_FOUND, and
      // failed calls are costly under ThreadSanitizer (gRPC's error path).
      for (size_t i = 0; i < names_.size() && live >= static_cast<int>(names_.size()); ++i) {
        grpc::ClientContext hb_ctx;
        hb_ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
        proto::HeartbeatRequest req;
        req.set_worker_id(names_[i]);
        req.set_incarnation(1);
        proto::HeartbeatReply hb;
        if (stub_->Heartbeat(&hb_ctx, req, &hb).ok()) ++heartbeats;
      }
      // A poll every 50 ms (the load it adds, not an order of events); Stop() ends the wait.
      std::unique_lock<std::mutex> lock(mu_);
      if (cv_.wait_for(lock, std::chrono::duration<double>(0.05 * kSlow), [&] { return stop_; }))
        return;
    }
  }
  std::vector<std::string> names_;
  std::unique_ptr<proto::ParameterServer::Stub> stub_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

// A client whose calls outlast a barrier wait for the leaver.
worker::ClientOptions Client(const Cluster& c, int w) {
  worker::ClientOptions o = c.Client(w);
  o.deadline_s = 2 * kWorkerTimeout + 30;
  return o;
}

std::vector<std::string> Names(int n) {
  std::vector<std::string> names;
  for (int w = 0; w < n; ++w) names.push_back("worker-" + std::to_string(w));
  return names;
}

// What one worker saw at one step.
struct Seen {
  int contributors = -1;  // -1: the worker did not take part
  double error = -1;      // max |received - expected mean| over every key
};

// PushPull on even steps, Push then Pull(step) on odd ones: both RPC paths interleave.
worker::StepMetrics Exchange(worker::GrpcPsClient& client, int64_t step,
                             const std::vector<torch::Tensor>& grads,
                             std::vector<torch::Tensor>* out) {
  if (step % 2 == 0) return client.PushPull(step, grads, out);
  client.Push(step, grads);
  return client.Pull(out, step);
}

double MaxError(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want) {
  double e = 0;
  for (size_t k = 0; k < got.size(); ++k)
    e = std::max(e, (got[k] - want[k]).abs().max().item<double>());
  return e;
}

// Dense gradients, deterministic per (worker, step, key), from a private generator.
std::vector<torch::Tensor> DenseGrads(int w, int64_t step, const std::vector<TensorSpec>& specs) {
  std::vector<torch::Tensor> g;
  for (size_t k = 0; k < specs.size(); ++k) {
    auto gen = at::detail::createCPUGenerator(1000 * step + 10 * w + k);
    g.push_back(torch::randn(specs[k].shape, gen));
  }
  return g;
}

TEST_CASE("8 workers, codec none: exact means while stats, heartbeats, a leaver, checkpoints",
          "[concurrency]") {
  torch::set_num_threads(1);
  TempDir dir;
  Cluster c(Options(dir.path), 2 * kWorkerTimeout + 30);
  const auto specs = Specs({{300, 20}, {7}, {1000}});
  constexpr int kLeaver = kWorkers - 1;  // stops calling at kLeaveAt; dropped after the timeout
  constexpr int64_t kLeaveAt = kSteps / 3;
  Poller poller(c.port, Names(kWorkers - 1));  // keeps all but the leaver alive
  std::vector<std::vector<Seen>> seen(kWorkers, std::vector<Seen>(kSteps));
  Cluster::Parallel(kWorkers, [&](int w) {
    worker::GrpcPsClient client(Client(c, w));
    client.Register(specs);
    auto params = Zeros(specs);
    client.InitOrPull(&params);
    for (int64_t step = 0; step < kSteps; ++step) {
      if (w == kLeaver && step == kLeaveAt) return;
      std::vector<torch::Tensor> out = Zeros(specs);
      const auto st = Exchange(client, step, DenseGrads(w, step, specs), &out);
      const int n = step < kLeaveAt ? kWorkers : kWorkers - 1;
      std::vector<torch::Tensor> mean = Zeros(specs);
      for (int o = 0; o < n; ++o) {
        const auto g = DenseGrads(o, step, specs);
        for (size_t k = 0; k < specs.size(); ++k) mean[k] += g[k];
      }
      for (auto& m : mean) m /= n;
      seen[w][step] = {st.contributors, MaxError(out, mean)};
    }
  });
  poller.Stop();
  for (int w = 0; w < kWorkers; ++w) {
    for (int64_t step = 0; step < kSteps; ++step) {
      if (w == kLeaver && step >= kLeaveAt) continue;
      INFO("worker " << w << " step " << step);
      CHECK(seen[w][step].contributors == (step < kLeaveAt ? kWorkers : kWorkers - 1));
      CHECK(seen[w][step].error < 1e-5);
    }
  }
  CHECK(c.runner.store().step() == kSteps);
  const auto stats = c.runner.store().Stats();
  CHECK(stats.live_workers == kWorkers - 1);
  CHECK(stats.rejected.empty());
  CHECK(poller.stats_calls > 0);
  CHECK(poller.heartbeats > 0);
  CHECK_FALSE(poller.steps_went_down);
  // Checkpoints were written every 5 steps while the workers ran; the newest is complete.
  const auto files = ListCheckpoints(dir.path);
  REQUIRE_FALSE(files.empty());
  CHECK(files.front().first == kSteps);
  const auto latest = LoadLatestCheckpoint(dir.path);
  REQUIRE(latest.has_value());
  CHECK(latest->step == kSteps);
}

// Sparse gradients that top-k (ratio 0.01 of 25600 = 256) then qsgd (16 levels, one 512
// bucket) carry exactly: at step t every worker has the same 256 nonzeros, each +-1/16, so
// qsgd's level is exactly 1 and error feedback keeps no residual. At each nonzero, 5 of the
// 8 workers agree on its sign, so the mean is +-1/64 there: again 256 equal magnitudes,
// which the server's own top-k + qsgd pull sends exactly. Every worker must receive it.
constexpr int64_t kSparseNumel = 25600;
constexpr int kNonzeros = 256;

int64_t Position(int j, int64_t step) { return j * 100 + step % 100; }
float Sign(int j, int64_t step) { return (j * 7 + step) % 3 == 0 ? -1.f : 1.f; }

torch::Tensor SparseGrad(int w, int64_t step) {
  torch::Tensor g = torch::zeros({kSparseNumel});
  auto a = g.accessor<float, 1>();
  for (int j = 0; j < kNonzeros; ++j) {
    const float agree = (w + j + step) % kWorkers < 5 ? 1.f : -1.f;
    a[Position(j, step)] = Sign(j, step) * agree / 16;
  }
  return g;
}

torch::Tensor SparseMean(int64_t step) {
  torch::Tensor m = torch::zeros({kSparseNumel});
  auto a = m.accessor<float, 1>();
  for (int j = 0; j < kNonzeros; ++j) a[Position(j, step)] = Sign(j, step) / 64;
  return m;
}

CodecSpec TopKQsgd() {
  auto c = ParseCodecShorthand("topk ratio=0.01");
  c.then = std::make_shared<CodecSpec>(ParseCodecShorthand("qsgd levels=16"));
  c.error_feedback = true;
  return c;
}

TEST_CASE("8 workers, topk+qsgd with error feedback both ways: exact means under load",
          "[concurrency]") {
  torch::set_num_threads(1);
  TempDir dir;
  auto opts = Options(dir.path);
  opts.pull = TopKQsgd();
  Cluster c(opts, 2 * kWorkerTimeout + 30);
  // layer0 travels compressed both ways; layer1 is under min_numel and travels as "none".
  const auto specs = Specs({{kSparseNumel}, {50}});
  Poller poller(c.port, Names(kWorkers));
  std::vector<std::vector<Seen>> seen(kWorkers, std::vector<Seen>(kSteps));
  std::vector<uint64_t> bytes_up(kWorkers);
  Cluster::Parallel(kWorkers, [&](int w) {
    auto o = Client(c, w);
    o.push = TopKQsgd();
    worker::GrpcPsClient client(o);
    client.Register(specs);
    auto params = Zeros(specs);
    client.InitOrPull(&params);
    for (int64_t step = 0; step < kSteps; ++step) {
      std::vector<torch::Tensor> out = Zeros(specs);
      auto dense = DenseGrads(w, step, {specs[1]});
      const auto st = Exchange(client, step, {SparseGrad(w, step), dense[0]}, &out);
      bytes_up[w] += st.bytes_up;
      torch::Tensor bias_mean = torch::zeros({50});
      for (int v = 0; v < kWorkers; ++v) bias_mean += DenseGrads(v, step, {specs[1]})[0];
      seen[w][step] = {st.contributors, MaxError(out, {SparseMean(step), bias_mean / kWorkers})};
    }
  });
  poller.Stop();
  for (int w = 0; w < kWorkers; ++w) {
    for (int64_t step = 0; step < kSteps; ++step) {
      INFO("worker " << w << " step " << step);
      CHECK(seen[w][step].contributors == kWorkers);
      CHECK(seen[w][step].error < 1e-6);
    }
    // Compressed for real: far below the dense 4 bytes per element.
    CHECK(bytes_up[w] < kSteps * (kSparseNumel * 4 / 10));
  }
  CHECK(c.runner.store().step() == kSteps);
  CHECK(c.runner.store().Stats().rejected.empty());
  CHECK_FALSE(poller.steps_went_down);
  const auto latest = LoadLatestCheckpoint(dir.path);
  REQUIRE(latest.has_value());
  CHECK(latest->step == kSteps);
}

TEST_CASE("8 workers async: every concurrent push applied exactly once", "[concurrency]") {
  torch::set_num_threads(1);
  TempDir dir;
  auto opts = Options(dir.path);
  opts.async = true;
  opts.exchange_weights = true;
  opts.sgd = {1.0, 0.0, 0.0, false};
  opts.max_staleness = 1 << 20;
  Cluster c(opts, 2 * kWorkerTimeout + 30);
  const auto specs = Specs({{1000}});
  Poller poller(c.port, Names(kWorkers));
  std::vector<int> duplicates_missed(kWorkers);
  Cluster::Parallel(kWorkers, [&](int w) {
    worker::GrpcPsClient client(Client(c, w));
    client.Register(specs);
    auto params = Zeros(specs);
    client.InitOrPull(&params);
    for (int64_t i = 0; i < kSteps; ++i) {
      const int64_t base = c.runner.store().step();
      client.Push(i, {torch::full({1000}, static_cast<float>(w + 1))}, base);
      if (i % 5 == 0 && !client.Push(i, {torch::full({1000}, 100.f)}, base).duplicate)
        ++duplicates_missed[w];
    }
  });
  poller.Stop();
  for (int w = 0; w < kWorkers; ++w) CHECK(duplicates_missed[w] == 0);
  // Each worker w pushed gradient w + 1 kSteps times with lr 1: -(1 + ... + 8) * kSteps.
  worker::GrpcPsClient reader(Client(c, 0));
  reader.Register(specs);
  auto out = Zeros(specs);
  reader.Pull(&out);
  CHECK(out[0].eq(-36.f * kSteps).all().item<bool>());
  CHECK(c.runner.store().step() == kWorkers * kSteps);
  const auto latest = LoadLatestCheckpoint(dir.path);
  REQUIRE(latest.has_value());
  CHECK(latest->step == kWorkers * kSteps);
}

}  // namespace
}  // namespace gradpress::testing
