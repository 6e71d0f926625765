// gradpress-worker: one training process of a gradpress job.
//
//   gradpress-worker --config configs/lenet_fmnist_m5.yaml --rank 0 --workers 2
//       --server 127.0.0.1:50051 --run-dir runs/x/20261122-1200 --set train.epochs=1
//
// Parse CLI -> load config (file + --set overrides) -> resolve identity (flags, then RANK /
// SLURM_PROCID, WORLD_SIZE / SLURM_NTASKS, GRADPRESS_SERVER) -> Trainer::Run. Writes the
// resolved config to <run-dir>/config.yaml (rank 0). Exit 0 on success, 2 on a bad config or
// flag (with the reason), 1 on a failure while training.
// Checkpoints go to <run-dir>/ckpt/worker-<rank> (train.checkpoint_every server steps, and at
// the end). The security: block (TLS, bearer token) and faults: block apply to every call to
// the server; $GRADPRESS_TOKEN and $GRADPRESS_FAULTS override them. --resume auto continues from
// the checkpoint of the server's step (restart the server with --resume auto as well); without
// --run-dir it picks the newest run directory of this config under output.dir that holds a
// checkpoint of this rank. SIGTERM / SIGINT: the current step finishes, a checkpoint is written,
// exit 0.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <optional>

#include "common/checkpoint.h"
#include "common/config.h"
#include "common/error.h"
#include "common/huge_pages.h"
#include "common/logging.h"
#include "transport/fault_injection.h"
#include "transport/security.h"
#include "worker/client/grpc_ps_client.h"
#include "worker/loop/trainer.h"
#include "worker/models/blas.h"

namespace {

std::atomic<bool> g_stop{false};
void OnSignal(int /*sig*/) { g_stop = true; }

// The newest <output.dir>/<name>/<run> holding a checkpoint of `rank` ("" if none).
std::string NewestRunWithCheckpoint(const gradpress::Config& config, int rank) {
  namespace fs = std::filesystem;
  const fs::path root = fs::path(config.output.dir) / config.name;
  std::error_code ec;
  std::string best;
  if (!fs::is_directory(root, ec)) return best;
  for (const auto& run : fs::directory_iterator(root, ec)) {
    const std::string dir = run.path().string();
    if (gradpress::ListCheckpoints(dir + "/ckpt/worker-" + std::to_string(rank)).empty()) continue;
    if (best.empty() || run.path().filename().string() > fs::path(best).filename().string())
      best = dir;  // run directories are named by timestamp
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  gradpress::UseHugePagesForLargeBuffers(argv);
  CLI::App app{"gradpress-worker: one worker of a gradpress training job"};
  std::string config_path, run_dir, log_level = "info";
  std::optional<int> rank, workers;
  std::optional<std::string> server;
  std::vector<std::string> overrides;
  bool print_config = false;
  int64_t max_steps = 0;
  uint64_t incarnation = 1;
  std::string resume = "never", checkpoint_dir;
  app.add_option("--config", config_path, "experiment YAML")->required();
  app.add_option("--rank", rank, "0-based rank (else $RANK, $SLURM_PROCID, 0)");
  app.add_option("--workers", workers, "world size (else $WORLD_SIZE, $SLURM_NTASKS, config)");
  app.add_option("--server", server, "host:port (else $GRADPRESS_SERVER, cluster.server)");
  app.add_option("--set", overrides, "override a config key, e.g. --set train.lr=0.05");
  app.add_option("--run-dir", run_dir, "where metrics.jsonl and summary.json go");
  app.add_option("--max-steps", max_steps, "stop after this many steps (0: all epochs)");
  app.add_option("--incarnation", incarnation, "raise on every restart of this worker");
  app.add_option("--resume", resume, "auto: continue from the checkpoint of the server's step")
      ->check(CLI::IsMember({"auto", "never"}));
  app.add_option("--checkpoint-dir", checkpoint_dir,
                 "checkpoint directory (default <run-dir>/ckpt/worker-<rank>)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  app.add_flag("--print-config", print_config, "print the resolved config and exit");
  CLI11_PARSE(app, argc, argv);
  gradpress::Config config;
  gradpress::Identity id;
  try {
    config = gradpress::LoadConfig(config_path, overrides);
    if (print_config) {
      std::cout << gradpress::ToYaml(config);
      return 0;
    }
    id = gradpress::ResolveIdentity(rank, workers, server, config);
    config.cluster.workers = id.workers;  // the job's world size, as the server expects it
    config.cluster.servers = gradpress::ResolveServers(config);  // shards, if any
    // Logs go to stderr; scripts/run.sh captures them as <run-dir>/worker-<rank>.log.
    gradpress::SetupLogging(log_level, "", "worker-" + std::to_string(id.rank));
    if (resume == "auto" && run_dir.empty() && checkpoint_dir.empty()) {
      run_dir = NewestRunWithCheckpoint(config, id.rank);
      GP_ENFORCE(!run_dir.empty(), "--resume auto: no run of '", config.name, "' under ",
                 config.output.dir, " holds a checkpoint of rank ", id.rank, "; pass --run-dir");
      std::cerr << "gradpress-worker: resuming in " << run_dir << std::endl;
    }
    if (!run_dir.empty() && id.rank == 0)
      gradpress::WriteResolvedConfig(config, run_dir + "/config.yaml");
    // The Trainer's client uses the config's security and faults ($GRADPRESS_TOKEN and
    // $GRADPRESS_FAULTS override them); a file or env text that does not work exits 2 now.
    gradpress::transport::LoadClientSecurity(config.security);
    const auto faults = gradpress::transport::ResolveFaults(config.faults);
    if (faults.ClientSide()) spdlog::warn("injected faults on: {}", faults.ToString());
  } catch (const gradpress::Error& e) {
    std::cerr << "gradpress-worker: " << e.what() << std::endl;
    return 2;
  }
  try {
    gradpress::worker::TrainerOptions o;
    o.config = config;
    o.rank = id.rank;
    o.workers = id.workers;
    o.server = id.server;
    o.run_dir = run_dir;
    o.incarnation = incarnation;
    o.max_steps = max_steps;
    o.checkpoint_dir = checkpoint_dir;
    o.resume = resume == "auto";
    o.stop = &g_stop;
    std::signal(SIGTERM, OnSignal);
    std::signal(SIGINT, OnSignal);
    gradpress::worker::Trainer trainer(o);
    gradpress::worker::LogBlas("gradpress-worker");
    const auto s = trainer.Run();
    if (g_stop)
      spdlog::info("stopped by a signal after {} steps (resume with --resume auto)", s.steps);
    spdlog::info(
        "done: {} steps, test_acc {:.4f}, {:.0f} B up / {:.0f} B down per step, {:.2f} "
        "ms per step, {:.1f} s",
        s.steps, s.test_acc, s.bytes_up_per_step, s.bytes_down_per_step, s.totals.Mean("step_ms"),
        s.wall_s);
    return 0;
  } catch (const std::exception& e) {
    spdlog::error("training failed: {}", e.what());
    return 1;
  }
}
