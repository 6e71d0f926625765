// gradpress-server: the parameter-server daemon.
//
//   gradpress-server --config configs/lenet_fmnist_m5.yaml --listen 0.0.0.0:50051
//       --workers 2 --set server.threads=4
//
// Parse CLI -> load config -> build the store, service and runner -> serve until SIGTERM or
// SIGINT, then stop accepting, give in-flight calls 5 s, and exit 0. A bad config or an
// address that cannot be bound exits 2 with the reason.
// Checkpoints (with --run-dir or --checkpoint-dir): every train.checkpoint_every steps into
// <run-dir>/ckpt/server, and a final one on SIGTERM. --resume auto restores the newest valid
// one (a corrupt newest file falls back to the previous); --resume FILE restores that file.
// security: TLS and a bearer token (transport/security.h; the token may come from
// $GRADPRESS_TOKEN); faults: injected faults, also from $GRADPRESS_FAULTS
// (transport/fault_injection.h).
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "common/checkpoint.h"
#include "common/config.h"
#include "common/error.h"
#include "common/huge_pages.h"
#include "common/logging.h"
#include "server/http_endpoint.h"
#include "server/server_options.h"
#include "server/server_runner.h"
#include "transport/fault_injection.h"

namespace {
volatile std::sig_atomic_t g_signal = 0;
void OnSignal(int sig) { g_signal = sig; }
}  // namespace

int main(int argc, char** argv) {
  gradpress::UseHugePagesForLargeBuffers(argv);
  CLI::App app{"gradpress-server: the parameter server"};
  std::string config_path, listen, log_level = "info", log_file, run_dir, checkpoint_dir;
  std::string port_file;
  std::string resume = "never";
  std::optional<int> workers, shard, shards;
  std::vector<std::string> overrides;
  app.add_option("--config", config_path, "experiment YAML (defaults apply without one)");
  app.add_option("--listen", listen, "host:port to serve (default: server.listen)");
  app.add_option("--workers", workers, "workers to expect (default: cluster.workers)");
  app.add_option("--shard", shard, "this server's shard index (default: $GRADPRESS_SHARD, else 0)");
  app.add_option("--shards", shards,
                 "shard count (default: $GRADPRESS_SHARDS, else the length of cluster.servers, "
                 "else 1)");
  app.add_option("--set", overrides, "override a config key, e.g. --set server.threads=4");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  app.add_option("--log-file", log_file, "also log to this file");
  app.add_option("--run-dir", run_dir,
                 "run directory: checkpoints go to <run-dir>/ckpt/server (server-<i> for shard i "
                 "of several)");
  app.add_option("--checkpoint-dir", checkpoint_dir, "checkpoint directory (overrides --run-dir)");
  app.add_option("--resume", resume, "auto | never | a checkpoint file to restore");
  app.add_option("--port-file", port_file,
                 "write the bound port here once listening (for --listen host:0)");
  CLI11_PARSE(app, argc, argv);
  try {
    gradpress::SetupLogging(log_level, log_file, "server");
    gradpress::Config config = config_path.empty()
                                   ? gradpress::ParseConfig("{}", "<defaults>", overrides)
                                   : gradpress::LoadConfig(config_path, overrides);
    if (workers) {
      GP_ENFORCE(*workers >= 1, "--workers must be at least 1, got ", *workers);
      config.cluster.workers = *workers;
    }
    if (listen.empty()) listen = config.server.listen;
    gradpress::server::StoreOptions store_options =
        gradpress::server::StoreOptionsFromConfig(config);
    gradpress::ResolveShard(shard, shards, config, &store_options.shard, &store_options.shards);
    // Shard 0 of 1 keeps the unsharded layout; shard i of S > 1 checkpoints in server-<i>.
    const std::string ckpt_name = store_options.shards > 1
                                      ? "server-" + std::to_string(store_options.shard)
                                      : std::string("server");
    if (checkpoint_dir.empty() && !run_dir.empty()) checkpoint_dir = run_dir + "/ckpt/" + ckpt_name;
    store_options.checkpoint_dir = checkpoint_dir;
    std::optional<gradpress::Checkpoint> restore;
    if (resume == "auto") {
      GP_ENFORCE(!checkpoint_dir.empty(), "--resume auto needs --run-dir or --checkpoint-dir");
      restore = gradpress::LoadLatestCheckpoint(checkpoint_dir);
      if (!restore) spdlog::info("no checkpoint in {}: starting fresh", checkpoint_dir);
    } else if (resume != "never") {
      restore = gradpress::ReadCheckpoint(resume);
    }
    // Security (certificates, token) and injected faults ($GRADPRESS_FAULTS) are checked
    // here: a bad one exits 2 with the reason, before anything listens.
    gradpress::server::ServerRunner runner(store_options, config.server.deadline_s, config.security,
                                           gradpress::transport::ResolveFaults(config.faults));
    if (restore) runner.store().RestoreCheckpoint(*restore);
    std::signal(SIGTERM, OnSignal);
    std::signal(SIGINT, OnSignal);
    // Without the HTTP port nobody reads the dashboard's rows: none are kept (scripts/soak.sh
    // found them growing the server's memory by ~300 bytes a worker a step).
    if (config.server.metrics_port <= 0) runner.dashboard().set_max_rows(0);
    const int port = runner.Start(listen);
    // The dashboard's URL is logged before "listening on": launchers that wait for that line
    // find the URL already written.
    std::unique_ptr<gradpress::server::HttpEndpoint> metrics;
    if (config.server.metrics_port > 0) {
      const int metrics_port = config.server.metrics_port + store_options.shard;  // one a shard
      runner.dashboard().set_job(config.name);
      metrics = std::make_unique<gradpress::server::HttpEndpoint>(
          [&](const gradpress::server::HttpRequest& r) { return runner.dashboard().Handle(r); });
      metrics->Start(config.server.metrics_host, metrics_port);
      const std::string host =
          config.server.metrics_host == "0.0.0.0" ? "<this host>" : config.server.metrics_host;
      spdlog::info("dashboard: http://{}:{}/{}  (Prometheus: /metrics)", host, metrics_port,
                   runner.dashboard().needs_token() ? "?token=<security.token_file>" : "");
    }
    std::cout << "gradpress-server: listening on port " << port << std::endl;
    if (!port_file.empty()) {  // whole or absent: written aside, then renamed
      const std::string tmp = port_file + ".tmp";
      GP_ENFORCE(static_cast<bool>(std::ofstream(tmp) << port << "\n"),
                 "--port-file: cannot write ", tmp);
      std::filesystem::rename(tmp, port_file);
    }
    if (store_options.shards > 1)
      spdlog::info("shard {} of {}", store_options.shard, store_options.shards);
    spdlog::info("job '{}': {} workers, {} mode, exchange {}, pull {}", config.name,
                 config.cluster.workers, config.sync.mode, config.sync.exchange, config.pull.codec);
    while (!g_signal) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    spdlog::info("signal {}: stopping", static_cast<int>(g_signal));
    if (metrics) metrics->Stop();
    runner.Stop(5.0);
    try {
      const std::string path = runner.store().WriteCheckpoint();
      if (!path.empty()) spdlog::info("final checkpoint: {}", path);
    } catch (const gradpress::Error& e) {
      spdlog::error("final checkpoint failed: {}", e.what());
    }
    const auto s = runner.store().Stats();
    spdlog::info("served {} steps, {:.1f} MB in, {:.1f} MB out, {} pushes applied, {} duplicates",
                 s.steps, s.bytes_in / 1e6, s.bytes_out / 1e6, s.pushes_applied, s.duplicates);
    return 0;
  } catch (const gradpress::Error& e) {
    std::cerr << "gradpress-server: " << e.what() << std::endl;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "gradpress-server: failed: " << e.what() << std::endl;
    return 1;
  }
}
