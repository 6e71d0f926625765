// Resume: a job stopped after its checkpoint and resumed (server and workers) ends with the
// weights of an uninterrupted run. In-process server on 127.0.0.1:0, workers as threads.
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "common/checkpoint.h"
#include "common/config.h"
#include "server/server_options.h"
#include "tests/server/cluster.h"
#include "tests/temp_dir.h"
#include "tests/wait_for.h"
#include "tests/worker/trainer/step_gate.h"
#include "tests/worker/trainer/trainer_util.h"
#include "worker/client/grpc_ps_client.h"
#include "worker/loop/trainer.h"

namespace gradpress::testing {
namespace {

namespace fs = std::filesystem;
using worker::Trainer;
using worker::TrainerOptions;

using testing::TempDir;

enum class ServerEnd { kFinalCheckpoint, kKilled };

// One job of `max_steps` steps per worker in run_dir; the server checkpoints into
// run_dir/ckpt/server. resume: the server restores its newest checkpoint and the workers
// theirs. Returns every worker's final weights.
std::vector<std::vector<torch::Tensor>> RunJob(const Config& c, const std::string& run_dir,
                                               int64_t max_steps, bool resume, ServerEnd end) {
  server::StoreOptions so = server::StoreOptionsFromConfig(c);
  so.checkpoint_dir = run_dir + "/ckpt/server";
  Cluster cluster(so);
  if (resume) {
    auto ckpt = LoadLatestCheckpoint(so.checkpoint_dir);
    REQUIRE(ckpt.has_value());
    cluster.runner.store().RestoreCheckpoint(*ckpt);
  }
  std::vector<std::vector<torch::Tensor>> weights(c.cluster.workers);
  Cluster::Parallel(c.cluster.workers, [&](int r) {
    TrainerOptions o = TrainerOptionsFor(c, r, cluster, run_dir, max_steps);
    o.resume = resume;
    Trainer t(o);
    t.Run();
    for (const auto& p : t.Parameters()) weights[r].push_back(p.clone());
  });
  if (end == ServerEnd::kFinalCheckpoint) cluster.runner.store().WriteCheckpoint();
  return weights;
}

std::vector<int64_t> Steps(const std::string& dir) {
  std::vector<int64_t> s;
  for (const auto& [step, path] : ListCheckpoints(dir)) s.push_back(step);
  return s;
}

// 16 steps per epoch (256 images per worker, batch 16): 20 steps cross an epoch boundary,
// so the resumed run also reshuffles by epoch and follows the cosine schedule.
Config MakeConfig(const std::string& method) {
  return ParseConfig(R"(
name: resume-test
model: lenet
dataset: {name: synthetic, subset: 512, test_subset: 64}
device: cpu
train: {epochs: 3, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 11, log_every: 0,
        lr_schedule: cosine, warmup_epochs: 0.5, checkpoint_every: 5}
cluster: {workers: 2}
server: {deadline_s: 30, worker_timeout_s: 30}
)" + method);
}

void CheckResume(const std::string& method, int64_t stop_at, ServerEnd end, int64_t resumes_from) {
  const Config c = MakeConfig(method);
  const int64_t total = 20;
  TempDir straight, split;
  const auto ref = RunJob(c, straight.path, total, false, ServerEnd::kKilled);
  const auto stopped = RunJob(c, split.path, stop_at, false, end);
  // The server's newest checkpoint decides where everyone resumes.
  const auto server_steps = Steps(split.path + "/ckpt/server");
  REQUIRE(!server_steps.empty());
  CHECK(server_steps.front() == resumes_from);
  const auto resumed = RunJob(c, split.path, total - resumes_from, true, ServerEnd::kKilled);
  const double d0 = MaxDiff(ref[0], resumed[0]), d1 = MaxDiff(ref[1], resumed[1]);
  const double moved = MaxDiff(ref[0], stopped[0]);  // the resumed steps did train
  WARN(method << ": stopped at " << stop_at << ", resumed from " << resumes_from
              << ": max |w_resumed - w_straight| = " << d0 << " / " << d1
              << " (training moved weights by " << moved << ")");
  CHECK(moved > 1e-3);
  CHECK(d0 == 0.0);
  CHECK(d1 == 0.0);
}

TEST_CASE("resume: method 3 (gradients, local SGD momentum) continues exactly", "[resume]") {
  // Stopped at 12: the workers' final checkpoint (12) matches the server's final one.
  CheckResume("sync: {mode: sync, exchange: gradients}", 12, ServerEnd::kFinalCheckpoint, 12);
}

TEST_CASE("resume: method 1 (server SGD with momentum) continues exactly", "[resume]") {
  // The server was killed (no final checkpoint): its newest is step 10, and the workers go
  // back to their step-10 checkpoint, not their newer step-12 one.
  CheckResume("sync: {mode: sync, exchange: weights}", 12, ServerEnd::kKilled, 10);
}

TEST_CASE("resume: method 5 (top-k + qsgd both ways, error feedback) continues exactly",
          "[resume]") {
  // Residuals on both sides and qsgd's random streams are part of the checkpoints.
  CheckResume(R"(sync: {mode: sync, exchange: gradients}
push: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
pull: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
compress: {min_numel: 100})",
              12, ServerEnd::kFinalCheckpoint, 12);
}

TEST_CASE("resume: cross-barrier buckets (method 1, several buckets) continue exactly",
          "[resume]") {
  // A step's results arrive during the next forward: checkpoints settle them first.
  CheckResume("sync: {mode: sync, exchange: weights, bucket_mb: 0.02}", 12, ServerEnd::kKilled, 10);
}

TEST_CASE("resume: a worker without a checkpoint of the server's step is refused", "[resume]") {
  Config c = MakeConfig("sync: {mode: sync, exchange: gradients}");
  c.server.worker_timeout_s = 2;    // worker-0 goes on alone once worker-1 has failed
  c.server.shadow_weights = false;  // else the worker rejoins from the server's weights
  TempDir d;
  RunJob(c, d.path, 7, false, ServerEnd::kFinalCheckpoint);  // server 7; workers 5 and 7
  for (const auto& [step, path] : ListCheckpoints(d.path + "/ckpt/worker-1"))
    if (step == 7) fs::remove(path);
  CHECK_THROWS_WITH(RunJob(c, d.path, 3, true, ServerEnd::kKilled),
                    Catch::Contains("no worker checkpoint of the server's step 7") &&
                        Catch::Contains("it has steps 5"));
}

TEST_CASE("resume: a lone worker rejoins a running server from its shadow weights", "[resume]") {
  // Method 5 (compressed pull: the shadow steps on what workers decode). Both workers train
  // 12 steps; worker-1's step-12 checkpoint is lost (it died after step 10's), the server
  // keeps running; both restart with --resume auto and train 8 more steps.
  Config c = MakeConfig(R"(sync: {mode: sync, exchange: gradients}
push: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
pull: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
compress: {min_numel: 100})");
  TempDir d;
  Cluster cluster(server::StoreOptionsFromConfig(c));
  auto options = [&](int r, int64_t max_steps, bool resume, uint64_t incarnation) {
    TrainerOptions o = TrainerOptionsFor(c, r, cluster, d.path, max_steps);
    o.resume = resume;
    o.incarnation = incarnation;
    return o;
  };
  std::vector<std::vector<torch::Tensor>> first(2), second(2);
  Cluster::Parallel(2, [&](int r) {
    Trainer t(options(r, 12, false, 1));
    t.Run();
    for (const auto& p : t.Parameters()) first[r].push_back(p.clone());
  });
  // The server's weights are the workers' (a fresh worker-1 pulls them on Connect).
  {
    Trainer fresh(options(1, 0, false, 2));
    fresh.Connect();
    CHECK(MaxDiff(fresh.Parameters(), first[1]) < 1e-5);
  }
  for (const auto& [step, path] : ListCheckpoints(d.path + "/ckpt/worker-1"))
    if (step == 12) fs::remove(path);
  std::vector<int64_t> steps(2);
  Cluster::Parallel(2, [&](int r) {
    Trainer t(options(r, 8, true, 3));
    steps[r] = t.Run().steps;
    for (const auto& p : t.Parameters()) second[r].push_back(p.clone());
  });
  CHECK(steps[0] == 8);
  CHECK(steps[1] == 8);
  const double apart = MaxDiff(second[0], second[1]), moved = MaxDiff(second[0], first[0]);
  WARN("lone rejoin: after 8 more steps the workers differ by "
       << apart << " (training moved them by " << moved << ")");
  CHECK(moved > 1e-3);
  // Worker-1 took the server's weights and its shadow SGD's momentum (the workers' own), so
  // both apply the same averaged update to the same state: one replica, up to the float
  // rounding between the server's SGD and torch's. (Before it took the momentum, its
  // 2-step-old own buffers left the replicas apart by about half of what training moved them.)
  CHECK(apart < 1e-4);
}

// The server dies mid-run (no final checkpoint) and a new one starts on the same port from
// its newest checkpoint: the workers see UNAVAILABLE, back off, find themselves unknown
// (NotFound), register again, roll back to their checkpoint of the server's step and finish.
// The events are ordered by what the test observes, never by sleeps: the server is stopped
// while both workers wait to push step 12 (it checkpointed step 10), and restarted once both
// have retried against the dead port.
void CheckServerRestart(const std::string& method) {
  const Config c = MakeConfig(method);
  const int64_t total = 20, kill_at = 12;
  TempDir straight, faulty;
  const auto ref = RunJob(c, straight.path, total, false, ServerEnd::kKilled);

  server::StoreOptions so = server::StoreOptionsFromConfig(c);
  so.checkpoint_dir = faulty.path + "/ckpt/server";
  auto runner = std::make_unique<server::ServerRunner>(so, 30);
  const int port = runner->Start("127.0.0.1:0");
  const std::string address = "127.0.0.1:" + std::to_string(port);
  std::vector<std::vector<torch::Tensor>> weights(2);
  std::vector<worker::TrainSummary> summaries(2);
  StepGate gate(kill_at);
  GatedWorkers workers(&gate, 2, [&](int r) {
    TrainerOptions o = TrainerOptionsFor(c, r, address, faulty.path, total);
    o.make_client = [&](const worker::ClientOptions& co, worker::KeyCodecs* codecs) {
      return std::make_unique<GatedClient>(co, codecs, &gate);
    };
    Trainer t(o);
    summaries[r] = t.Run();
    for (const auto& p : t.Parameters()) weights[r].push_back(p.clone());
  });
  REQUIRE(gate.WaitArrived(2));  // steps 0-11 done; both hold step 12's push
  const int64_t died_at = runner->store().step();
  runner->Stop(0);  // no final checkpoint
  runner.reset();
  gate.Open();
  REQUIRE(WaitFor([&] { return gate.Retried() == 2; }));  // both met the dead port
  auto restarted = std::make_unique<server::ServerRunner>(so, 30);
  auto ckpt = LoadLatestCheckpoint(so.checkpoint_dir);
  REQUIRE(ckpt.has_value());
  const int64_t restored = ckpt->step;
  restarted->store().RestoreCheckpoint(*ckpt);
  REQUIRE(restarted->Start(address) == port);
  workers.Join();
  const int64_t final_step = restarted->store().step();
  restarted->Stop(1.0);
  const double d0 = MaxDiff(ref[0], weights[0]), d1 = MaxDiff(ref[1], weights[1]);
  WARN(method << ": server died at step " << died_at << ", restarted from " << restored
              << ", ended at " << final_step << ": max |w - w_straight| = " << d0 << " / " << d1);
  CHECK(died_at == kill_at);
  CHECK(restored == 10);
  CHECK(final_step == total);
  for (int r = 0; r < 2; ++r) {
    INFO("worker " << r);
    CHECK(summaries[r].steps == total);
    CHECK(summaries[r].rejoins == 1);
  }
  CHECK(d0 == 0.0);
  CHECK(d1 == 0.0);
}

TEST_CASE("resume: workers rejoin a restarted server and end as if it never died (method 3)",
          "[resume][restart]") {
  CheckServerRestart("sync: {mode: sync, exchange: gradients}");
}

TEST_CASE("resume: workers rejoin a restarted server and end as if it never died (method 1)",
          "[resume][restart]") {
  CheckServerRestart("sync: {mode: sync, exchange: weights}");
}

TEST_CASE(
    "resume: with cross-barrier buckets, workers rejoin a restarted server exactly (method 3)",
    "[resume][restart]") {
  // The failed step's error surfaces in the next forward's layer gates or in Run's settle.
  CheckServerRestart("sync: {mode: sync, exchange: gradients, bucket_mb: 0.02}");
}

}  // namespace
}  // namespace gradpress::testing
