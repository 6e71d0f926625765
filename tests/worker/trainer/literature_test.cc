// Issue 5's training modes end to end through an in-process server: DGC (momentum
// correction, clipping, sparsity warm-up), dynamic compression, Gaussian-averaged exchange.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/config.h"
#include "server/server_options.h"
#include "tests/server/cluster.h"
#include "tests/worker/trainer/trainer_util.h"
#include "worker/loop/trainer.h"

namespace gradpress::testing {
namespace {

using worker::Trainer;
using worker::TrainSummary;

struct Job {
  std::vector<TrainSummary> summaries;
  std::string metrics;  // metrics.jsonl
};

Job RunJob(const std::string& yaml) {
  const Config c = ParseConfig(yaml);
  static int counter = 0;
  const std::string dir =
      (std::filesystem::temp_directory_path() /
       ("gp_literature_test_" + std::to_string(getpid()) + "_" + std::to_string(counter++)))
          .string();
  std::filesystem::remove_all(dir);
  Cluster cluster(server::StoreOptionsFromConfig(c));
  Job job;
  job.summaries.resize(c.cluster.workers);
  Cluster::Parallel(c.cluster.workers, [&](int r) {
    job.summaries[r] = Trainer(TrainerOptionsFor(c, r, cluster, dir)).Run();
  });
  std::ifstream f(dir + "/metrics.jsonl");
  std::stringstream s;
  s << f.rdbuf();
  job.metrics = s.str();
  std::filesystem::remove_all(dir);
  return job;
}

// Mean bytes_up of rank-0 step lines whose step is in [from, to).
double BytesUp(const std::string& metrics, int64_t from, int64_t to) {
  std::istringstream in(metrics);
  std::string line;
  double sum = 0;
  int n = 0;
  while (std::getline(in, line)) {
    if (line.find("\"rank\": 0,") == std::string::npos ||
        line.find("\"bytes_up\"") == std::string::npos)
      continue;
    const int64_t step = std::stoll(line.substr(line.find("\"step\": ") + 8));
    if (step < from || step >= to) continue;
    sum += std::stod(line.substr(line.find("\"bytes_up\": ") + 12));
    ++n;
  }
  REQUIRE(n > 0);
  return sum / n;
}

const char* kBase = R"(
model: lenet
dataset: {name: synthetic, subset: 1024, test_subset: 256}
device: cpu
cluster: {workers: 2}
server: {deadline_s: 30, worker_timeout_s: 30}
compress: {min_numel: 100)";

TEST_CASE("DGC: momentum correction, clipping and the sparsity warm-up train", "[dgc]") {
  // 32 steps per epoch; epoch 0 at density 25%, epoch 1 at 6.25%, then the target 1%.
  const Job job = RunJob(std::string("name: dgc-test") + kBase + R"(,
  momentum_correction: 0.9, clip_norm: 5, warmup_epochs: 2}
train: {epochs: 3, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 3, log_every: 0}
sync: {mode: sync, exchange: gradients}
push: {codec: dgc, ratio: 0.01}
pull: {codec: threshold, threshold: 0}
)");
  const auto& s = job.summaries[0];
  const double e0 = BytesUp(job.metrics, 0, 32), e1 = BytesUp(job.metrics, 32, 64),
               e2 = BytesUp(job.metrics, 64, 96);
  WARN("DGC: test_acc " << s.test_acc << ", bytes up per step by epoch " << e0 << ", " << e1 << ", "
                        << e2);
  CHECK(e0 > 2 * e1);  // 25% -> 6.25%
  CHECK(e1 > 2 * e2);  // 6.25% -> 1%
  CHECK(job.metrics.find("\"push_density\": 0.25") != std::string::npos);
  CHECK(job.metrics.find("\"push_density\": 0.0625") != std::string::npos);
  CHECK(job.metrics.find("\"push_density\": 0.01") != std::string::npos);
  CHECK(s.test_acc > 0.3);
  CHECK(job.summaries[1].test_acc == s.test_acc);  // same averaged update on both workers
}

TEST_CASE("dynamic compression moves up the ladder and records each change", "[dynamic]") {
  // Thresholds no real epoch meets: every epoch from the second on stalls, so epochs 0-1 run
  // 4-bit, 2 8-bit, 3 16-bit, 4 uncompressed (stalled on the top rung).
  const Job job = RunJob(std::string("name: dynamic-test") + kBase + R"(,
  dynamic: {ladder: "qsgd levels=7 elias=false | qsgd levels=127 elias=false | qsgd levels=32767 elias=false",
            acc_threshold: 1, loss_threshold: 1, patience: 10, uncompressed_epochs: 1}}
train: {epochs: 5, batch_size: 16, lr: 0.01, momentum: 0.9, seed: 3, log_every: 0}
sync: {mode: sync, exchange: gradients}
)");
  const double e0 = BytesUp(job.metrics, 0, 32), e1 = BytesUp(job.metrics, 32, 64),
               e2 = BytesUp(job.metrics, 64, 96), e3 = BytesUp(job.metrics, 96, 128),
               e4 = BytesUp(job.metrics, 128, 160);
  WARN("dynamic: bytes up per step by epoch " << e0 << ", " << e1 << ", " << e2 << ", " << e3
                                              << ", " << e4 << "; test_acc "
                                              << job.summaries[0].test_acc);
  CHECK(e1 == e0);
  CHECK(e2 > 1.5 * e1);  // 4 -> 8 bits
  CHECK(e3 > 1.5 * e2);  // 8 -> 16 bits
  CHECK(e4 > 1.5 * e3);  // uncompressed (32 bits)
  CHECK(job.summaries[0].test_acc > 0.3);
  CHECK(job.metrics.find("\"push_codec\": \"qsgd levels=127 elias=false\"") != std::string::npos);
  CHECK(job.metrics.find("\"push_codec\": \"none\"") != std::string::npos);
  CHECK(job.metrics.find("stalled") != std::string::npos);
}

TEST_CASE("compress.auto sends top-k on a slow link and more on a fast one, and trains", "[auto]") {
  // The same job, the choice made for a 100 kbit/s link and for a 10 Tbit/s one: on the
  // slow one every big key is worth top-k's encode, on the fast one no key's compression
  // saves more than the tie (worker/engine/auto_codecs.h): every key travels uncompressed.
  auto job = [](double gbps) {
    return RunJob(std::string("name: auto-test") + kBase +
                  ", auto: true, link_gbps: " + std::to_string(gbps) + R"(, topology: links}
train: {epochs: 1, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 3, log_every: 0}
sync: {mode: sync, exchange: gradients}
push: {codec: topk, ratio: 0.01, error_feedback: true}
pull: {codec: topk, ratio: 0.01, error_feedback: true}
)");
  };
  const Job slow = job(0.0001), fast = job(10000);
  const double slow_up = BytesUp(slow.metrics, 0, 32), fast_up = BytesUp(fast.metrics, 0, 32);
  WARN("compress.auto: bytes up per step "
       << slow_up << " at 100 kbit/s, " << fast_up << " at 10 Tbit/s; test_acc "
       << slow.summaries[0].test_acc << ", " << fast.summaries[0].test_acc);
  CHECK(10 * slow_up < fast_up);
  CHECK(slow.summaries[0].test_acc > 0.3);
  CHECK(fast.summaries[0].test_acc > 0.3);
}

TEST_CASE("Gaussian-averaged exchange sends two floats per key and trains", "[gaussian]") {
  const Job job = RunJob(std::string("name: gaussian-test") + kBase + R"(}
train: {epochs: 2, batch_size: 16, lr: 0.05, momentum: 0.9, seed: 3, log_every: 0}
sync: {mode: sync, exchange: gaussian}
)");
  const auto& s = job.summaries[0];
  WARN("gaussian: test_acc " << s.test_acc << " / " << job.summaries[1].test_acc
                             << ", bytes up/down per step " << s.bytes_up_per_step << " / "
                             << s.bytes_down_per_step << ", ratio " << s.ratio_up);
  CHECK(s.bytes_up_per_step == 10 * 8);  // LeNet: 10 keys x (mean, std) float32
  CHECK(s.bytes_down_per_step == 10 * 8);
  CHECK(s.test_acc > 0.3);
}

}  // namespace
}  // namespace gradpress::testing
