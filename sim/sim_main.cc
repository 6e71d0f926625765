// gradpress-sim: N simulated workers of a gradpress job in one process, for fast sweeps.
//
//   gradpress-sim --config configs/lenet_fmnist_m5.yaml --workers 2 --set train.epochs=1
//       --run-dir runs/x/20261122-1200-sim
//
// Parse CLI -> load config (file + --set overrides) -> sim::Simulator::Run. The run directory
// (default <output.dir>/<name>/<timestamp>-sim) gets config.yaml (resolved, cluster.workers =
// --workers), sim.log, metrics.jsonl and summary.json with the worker's field names, so
// scripts/plot.sh and scripts/sweep.sh read it like a cluster run. Exit 0 on success, 2 on a
// bad config or flag (with the reason), 1 on a failure while training.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <optional>

#include "common/config.h"
#include "common/error.h"
#include "common/logging.h"
#include "sim/simulator.h"

namespace {

std::string Timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y%m%d-%H%M%S", &tm);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"gradpress-sim: N simulated workers of a gradpress job in one process"};
  std::string config_path, run_dir, log_level = "info";
  std::optional<int> workers;
  std::vector<std::string> overrides;
  int64_t max_steps = 0;
  bool print_config = false;
  app.add_option("--config", config_path, "experiment YAML")->required();
  app.add_option("--workers", workers, "simulated workers (else cluster.workers)");
  app.add_option("--set", overrides, "override a config key, e.g. --set train.lr=0.05");
  app.add_option("--run-dir", run_dir,
                 "where metrics.jsonl and summary.json go (default "
                 "<output.dir>/<name>/<timestamp>-sim)");
  app.add_option("--max-steps", max_steps, "stop after this many steps (0: all epochs)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  app.add_flag("--print-config", print_config, "print the resolved config and exit");
  CLI11_PARSE(app, argc, argv);
  gradpress::Config config;
  try {
    config = gradpress::LoadConfig(config_path, overrides);
    if (workers) config.cluster.workers = *workers;
    GP_ENFORCE(config.cluster.workers >= 1, "--workers must be >= 1, got ", config.cluster.workers);
    if (print_config) {
      std::cout << gradpress::ToYaml(config);
      return 0;
    }
    if (run_dir.empty())
      run_dir = config.output.dir + "/" + config.name + "/" + Timestamp() + "-sim";
    std::filesystem::create_directories(run_dir);
    gradpress::SetupLogging(log_level, run_dir + "/sim.log", "sim");
    gradpress::WriteResolvedConfig(config, run_dir + "/config.yaml");
  } catch (const std::exception& e) {
    std::cerr << "gradpress-sim: " << e.what() << std::endl;
    return 2;
  }
  try {
    gradpress::sim::SimOptions o;
    o.config = config;
    o.workers = config.cluster.workers;
    o.run_dir = run_dir;
    o.max_steps = max_steps;
    gradpress::sim::Simulator sim(o);
    const auto s = sim.Run();
    spdlog::info(
        "done: {} workers, {} steps, test_acc {:.4f}, {:.0f} B up / {:.0f} B down per worker "
        "step, {:.2f} ms per step, {:.1f} s; {}",
        o.workers, s.steps, s.test_acc, s.bytes_up_per_step, s.bytes_down_per_step,
        s.totals.Mean("step_ms"), s.wall_s, run_dir);
    return 0;
  } catch (const gradpress::InvalidArgument& e) {
    spdlog::error("gradpress-sim: {}", e.what());
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("simulation failed: {}", e.what());
    return 1;
  }
}
