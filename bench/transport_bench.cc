// gradpress-bench transport: push / pull throughput of the parameter server over gRPC, with
// the server alone in its own process, against plain TCP loopback measured in the same run.
//
//   gradpress-bench transport [--numel N] [--workers W] [--steps S] [--codec SPEC]...
//                             [--threads T] [--keys K] [--json]
//   gradpress-bench transport --numel 62000 --steps 20   # LeNet size: server_step_ms <= 2?
//
// Per codec the bench starts the real gradpress-server binary (bench/server_process.h: a
// config file written for the row, 127.0.0.1:0, --port-file, until SIGTERM), then runs W
// PsClients as threads in lock step. Step s: barrier, every worker Push(s, grads);
// barrier, every worker Pull(&out, s). A phase lasts from the barrier's release until the
// last worker's call returned. Step 0 is a warm-up; S measured steps follow.
// push_gbps = W * 4 N / median push phase seconds / 1e9 (pull likewise); step_ms = median of
// push + pull; server_rss_mb = the server's VmHWM; server_step_ms = the server's apply +
// finalize ms per measured step (gradpress_step_server_ms); bytes_*_per_step = payload bytes
// per worker per step; tcp_gbps = median of 3 TCP transfers of W * 4 N bytes (tcp_loopback.h).
// Gradients: randn * 0.01 per worker, fixed seeds. Codec SPEC is used both ways (push and the
// server's pull codec), tensors of any size compressed (min_numel 0). Defaults: none, and
// method 5: "topk ratio=0.01 error_feedback=true then=qsgd levels=16".
// The child process lives in server_process.h, the barrier in barrier.h.
#include <torch/torch.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/barrier.h"
#include "bench/bench.h"
#include "bench/flat_model.h"
#include "bench/server_process.h"
#include "bench/tcp_loopback.h"
#include "common/error.h"
#include "common/logging.h"
#include "compressors/registry.h"
#include "worker/client/grpc_ps_client.h"

namespace gradpress::bench {
namespace {

using Clock = std::chrono::steady_clock;
using compressors::TensorSpec;

constexpr uint64_t kSeed = 20240601;
constexpr float kGradScale = 0.01f;
constexpr int kMinReportSteps = 20;  // README figures need at least this many
const char* const kMethod5 = "topk ratio=0.01 error_feedback=true then=qsgd levels=16";

struct TransportOptions {
  int64_t numel = 25'000'000;
  int workers = 2;
  int steps = 20;
  int keys = 1;
  int threads = 2;
  std::vector<std::string> specs;
  bool json = false;
};

struct Row {
  std::string codec;  // CodecSpec::ToString(): "none", "topk(ratio=0.01)+qsgd(...)+ef"
  double push_s = 0, pull_s = 0, step_s = 0;  // medians
  double rss_mb = 0, base_rss_mb = 0;         // server VmHWM; VmRSS before any worker
  double bytes_up = 0, bytes_down = 0;        // per worker per step
  double server_ms = 0;
  double encode_ms = 0, push_rpc_ms = 0, decode_ms = 0, pull_rpc_ms = 0;  // client, per call
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A gauge or counter "name value" from Prometheus text; NaN if absent.
double PromValue(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Server ms per step over the steps between two Stats snapshots.
double ServerMsBetween(const std::string& before, const std::string& after) {
  const double s0 = PromValue(before, "gradpress_steps_total");
  const double s1 = PromValue(after, "gradpress_steps_total");
  const double m0 = PromValue(before, "gradpress_step_server_ms");
  const double m1 = PromValue(after, "gradpress_step_server_ms");
  return (m1 * s1 - m0 * s0) / (s1 - s0);
}

std::vector<TensorSpec> Model(const TransportOptions& opt) {
  return FlatModel(opt.numel, opt.keys, "grad");
}

// The server's config for a row: its codec as the pull codec (every tensor compressed),
// W workers, the bench's deadline as RPC deadline and worker timeout, no shadow weights (the
// bench measures the exchange; a training job's server also steps the workers' weights).
std::string ServerConfigYaml(const CodecSpec& c, int workers, int threads) {
  YAML::Emitter e;
  e << YAML::BeginMap;
  e << YAML::Key << "name" << YAML::Value << "bench-transport";
  e << YAML::Key << "cluster" << YAML::Value << YAML::BeginMap << YAML::Key << "workers"
    << YAML::Value << workers << YAML::EndMap;
  e << YAML::Key << "compress" << YAML::Value << YAML::BeginMap << YAML::Key << "min_numel"
    << YAML::Value << 0 << YAML::EndMap;
  e << YAML::Key << "server" << YAML::Value << YAML::BeginMap << YAML::Key << "threads"
    << YAML::Value << threads << YAML::Key << "shadow_weights" << YAML::Value << false << YAML::Key
    << "worker_timeout_s" << YAML::Value << kRpcDeadlineS << YAML::Key << "deadline_s"
    << YAML::Value << kRpcDeadlineS << YAML::EndMap;
  e << YAML::Key << "pull" << YAML::Value;
  EmitCodecSpec(e, c);
  e << YAML::EndMap;
  return std::string(e.c_str()) + "\n";
}

Row RunCodec(const TransportOptions& opt, const std::string& spec, const CodecSpec& config,
             const std::string& port_file, const std::vector<std::vector<torch::Tensor>>& grads) {
  const int W = opt.workers, S = opt.steps;
  const std::string config_file = port_file + ".yaml";
  {
    std::ofstream out(config_file);
    out << ServerConfigYaml(config, W, opt.threads);
    if (!out) throw std::runtime_error("cannot write " + config_file);
  }
  ServerProcess server({ServerBinary(), "--config", config_file, "--listen", "127.0.0.1:0",
                        "--port-file", port_file, "--log-level", "warn"});
  const int port = server.WaitForPort(port_file);
  Row row{config.ToString()};
  row.base_rss_mb = server.StatusMb("VmRSS");
  const std::vector<TensorSpec> model = Model(opt);

  // [worker][step] ends of each call; [step] barrier releases (the same for every worker).
  std::vector<std::vector<Clock::time_point>> push_end(W, std::vector<Clock::time_point>(S + 1));
  auto pull_end = push_end;
  std::vector<Clock::time_point> push_start(S + 1), pull_start(S + 1);
  std::vector<double> up(W), down(W), encode(W), push_rpc(W), decode(W), pull_rpc(W);
  std::string stats_before, stats_after, first_error;
  std::mutex error_mu;
  Barrier barrier(W);
  auto work = [&](int w) {
    worker::ClientOptions o;
    o.server = "127.0.0.1:" + std::to_string(port);
    o.worker_id = "worker-" + std::to_string(w);
    o.push = config;
    o.min_numel = 0;
    o.deadline_s = kRpcDeadlineS;
    o.max_retries = 1;
    worker::GrpcPsClient client(o);
    client.Register(model);
    const torch::Tensor flat = torch::zeros({opt.numel});
    std::vector<torch::Tensor> out = SplitFlat(flat, model);
    client.InitOrPull(&out);
    for (int64_t step = 0; step <= S; ++step) {
      const Clock::time_point push_go = barrier.Wait();
      const worker::StepMetrics pushed = client.Push(step, grads[w]);
      push_end[w][step] = Clock::now();
      const Clock::time_point pull_go = barrier.Wait();
      const worker::StepMetrics pulled = client.Pull(&out, step);
      pull_end[w][step] = Clock::now();
      if (w == 0) push_start[step] = push_go, pull_start[step] = pull_go;
      if (step > 0) {
        up[w] += pushed.bytes_up, down[w] += pulled.bytes_down;
        encode[w] += pushed.encode_ms, push_rpc[w] += pushed.network_ms;
        decode[w] += pulled.decode_ms;
        pull_rpc[w] += Seconds(pull_end[w][step] - pull_go) * 1e3 - pulled.decode_ms;
      }
      if (w == 0 && step == 0) stats_before = client.StatsText();  // untimed
    }
    barrier.Wait();
    if (w == 0) stats_after = client.StatsText();
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < W; ++w) {
    threads.emplace_back([&, w] {
      try {
        work(w);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (first_error.empty()) {
          first_error = "worker-" + std::to_string(w) + ": " + e.what();
          const std::string how = server.EndedHow();
          if (!how.empty()) first_error += " (transport-server had ended: " + how + ")";
        }
        barrier.Break();
        server.Kill();  // ends the other workers' calls at once
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!first_error.empty()) throw std::runtime_error(first_error);
  row.rss_mb = server.StatusMb("VmHWM");
  server.Terminate();

  std::vector<double> push_s, pull_s, step_s;
  for (int step = 1; step <= S; ++step) {
    Clock::time_point push_last = push_start[step], pull_last = pull_start[step];
    for (int w = 0; w < W; ++w) {
      push_last = std::max(push_last, push_end[w][step]);
      pull_last = std::max(pull_last, pull_end[w][step]);
    }
    push_s.push_back(Seconds(push_last - push_start[step]));
    pull_s.push_back(Seconds(pull_last - pull_start[step]));
    step_s.push_back(push_s.back() + pull_s.back());
  }
  row.push_s = Median(push_s);
  row.pull_s = Median(pull_s);
  row.step_s = Median(step_s);
  for (int w = 0; w < W; ++w) {
    row.bytes_up += up[w] / (W * S), row.bytes_down += down[w] / (W * S);
    row.encode_ms += encode[w] / (W * S), row.push_rpc_ms += push_rpc[w] / (W * S);
    row.decode_ms += decode[w] / (W * S), row.pull_rpc_ms += pull_rpc[w] / (W * S);
  }
  row.server_ms = ServerMsBetween(stats_before, stats_after);
  return row;
}

double Gbps(const TransportOptions& opt, double seconds) {
  return static_cast<double>(opt.workers) * 4.0 * static_cast<double>(opt.numel) / seconds / 1e9;
}

void PrintJson(const TransportOptions& opt, const Row& r, double tcp) {
  std::cout << "{\"codec\":" << JsonString(r.codec) << ",\"numel\":" << opt.numel
            << ",\"workers\":" << opt.workers
            << ",\"push_gbps\":" << JsonNumber(Gbps(opt, r.push_s))
            << ",\"pull_gbps\":" << JsonNumber(Gbps(opt, r.pull_s))
            << ",\"step_ms\":" << JsonNumber(r.step_s * 1e3)
            << ",\"server_rss_mb\":" << JsonNumber(r.rss_mb) << ",\"tcp_gbps\":" << JsonNumber(tcp)
            << ",\"bytes_up_per_step\":" << JsonNumber(r.bytes_up)
            << ",\"bytes_down_per_step\":" << JsonNumber(r.bytes_down)
            << ",\"server_step_ms\":" << JsonNumber(r.server_ms) << ",\"steps\":" << opt.steps
            << ",\"push_ms\":" << JsonNumber(r.push_s * 1e3)
            << ",\"pull_ms\":" << JsonNumber(r.pull_s * 1e3)
            << ",\"server_base_rss_mb\":" << JsonNumber(r.base_rss_mb) << ",\"keys\":" << opt.keys
            << ",\"threads\":" << opt.threads << "}" << std::endl;
}

void PrintTable(const TransportOptions& opt, const std::vector<Row>& rows, double tcp) {
  int codec_w = 5;
  for (const Row& r : rows) codec_w = std::max(codec_w, static_cast<int>(r.codec.size()));
  std::printf(
      "numel %lld, workers %d, steps %d, keys %d, server threads %d; tcp loopback %.3f GB/s\n",
      static_cast<long long>(opt.numel), opt.workers, opt.steps, opt.keys, opt.threads, tcp);
  std::printf("%-*s  %9s  %5s  %9s  %5s  %9s  %9s  %9s  %8s  %12s  %12s\n", codec_w, "codec",
              "push GB/s", "%tcp", "pull GB/s", "%tcp", "step ms", "push ms", "server ms",
              "RSS MiB", "up B/step", "down B/step");
  for (const Row& r : rows) {
    const double push = Gbps(opt, r.push_s), pull = Gbps(opt, r.pull_s);
    std::printf(
        "%-*s  %9.3f  %4.0f%%  %9.3f  %4.0f%%  %9.2f  %9.2f  %9.3f  %8.0f  %12.0f  %12.0f\n",
        codec_w, r.codec.c_str(), push, 100 * push / tcp, pull, 100 * pull / tcp, r.step_s * 1e3,
        r.push_s * 1e3, r.server_ms, r.rss_mb, r.bytes_up, r.bytes_down);
  }
}

void RunTransport(const TransportOptions& opt) {
  GP_ENFORCE(opt.numel >= 1 && opt.numel <= std::numeric_limits<int32_t>::max(),
             "--numel must be in [1, 2^31 - 1], got ", opt.numel);
  GP_ENFORCE(opt.workers >= 1 && opt.workers <= 64, "--workers must be in [1, 64], got ",
             opt.workers);
  GP_ENFORCE(opt.steps >= 1 && opt.steps <= 100000, "--steps must be in [1, 100000], got ",
             opt.steps);
  GP_ENFORCE(opt.keys >= 1 && opt.keys <= opt.numel, "--keys must be in [1, numel], got ",
             opt.keys);
  GP_ENFORCE(opt.threads >= 1 && opt.threads <= 256, "--threads must be in [1, 256], got ",
             opt.threads);
  compressors::RegisterBuiltinCompressors();
  const std::vector<std::string> specs =
      opt.specs.empty() ? std::vector<std::string>{"none", kMethod5} : opt.specs;
  std::vector<CodecSpec> configs;
  for (const auto& spec : specs) {
    configs.push_back(ParseCodecShorthand(spec));
    compressors::MakeCompressor(configs.back());  // a bad spec fails before anything runs
  }
  if (opt.steps < kMinReportSteps) {
    std::cerr << "note: --steps " << opt.steps << " < " << kMinReportSteps
              << ": fine for a quick look, too few for a README figure\n";
  }
  try {
    SetupLogging("warn", "", "bench");  // client retry warnings to stderr, never stdout
    torch::set_num_threads(1);
    std::vector<std::vector<torch::Tensor>> grads;
    for (int w = 0; w < opt.workers; ++w) {
      auto gen = at::detail::createCPUGenerator(kSeed + w);
      grads.push_back(
          SplitFlat((torch::randn({opt.numel}, gen) * kGradScale).contiguous(), Model(opt)));
    }
    const uint64_t bytes = uint64_t{4} * opt.numel * opt.workers;
    std::cerr << "gradpress-bench transport: numel=" << opt.numel << " workers=" << opt.workers
              << " steps=" << opt.steps << " (+1 warm-up) keys=" << opt.keys
              << " server threads=" << opt.threads << "\n";
    const double tcp = TcpLoopbackGbps(bytes, 3);
    std::cerr << "  tcp loopback: " << tcp << " GB/s (" << bytes << " bytes, median of 3)\n";
    if (bytes < (16u << 20)) std::cerr << "  note: tcp_gbps is latency-bound at this size\n";
    std::string dir_template = (std::filesystem::temp_directory_path() / "gp-transport-XXXXXX");
    GP_ENFORCE_AS(Internal, ::mkdtemp(dir_template.data()) != nullptr, "mkdtemp failed");
    struct RemoveDir {
      std::string path;
      ~RemoveDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
      }
    } dir{dir_template};
    std::vector<Row> rows;
    for (size_t i = 0; i < specs.size(); ++i) {
      const std::string port_file = dir.path + "/port-" + std::to_string(i);
      Row row = RunCodec(opt, specs[i], configs[i], port_file, grads);
      std::cerr << "  " << row.codec << ": push " << row.push_s * 1e3 << " ms, pull "
                << row.pull_s * 1e3 << " ms, server " << row.server_ms << " ms/step, RSS "
                << row.rss_mb << " MiB (" << row.base_rss_mb << " MiB at start)\n"
                << "    client means per call: push = encode " << row.encode_ms << " + rpc "
                << row.push_rpc_ms << " ms; pull = rpc " << row.pull_rpc_ms << " + decode "
                << row.decode_ms << " ms\n";
      if (opt.json) PrintJson(opt, row, tcp);
      rows.push_back(std::move(row));
    }
    if (!opt.json) PrintTable(opt, rows, tcp);
  } catch (const std::exception& e) {  // a failed measurement, not bad input: exit 1
    throw std::runtime_error(std::string("transport: ") + e.what());
  }
}

}  // namespace

void AddTransportCommand(CLI::App& app) {
  auto opt = std::make_shared<TransportOptions>();
  CLI::App* cmd = app.add_subcommand(
      "transport",
      "Push/pull GB/s, step ms and peak RSS of the gRPC server (own process) with workers as "
      "threads, against plain TCP loopback. LeNet check: --numel 62000 (server ms <= 2)");
  cmd->add_option("--numel", opt->numel, "float32 elements in the model")->capture_default_str();
  cmd->add_option("--workers", opt->workers, "worker threads")->capture_default_str();
  cmd->add_option("--steps", opt->steps, "measured steps after one warm-up (>= 20 for README)")
      ->capture_default_str();
  cmd->add_option("--codec", opt->specs,
                  "codec spec used both ways, repeatable, replaces the defaults \"none\" and \"" +
                      std::string(kMethod5) + "\"")
      ->allow_extra_args(false);
  cmd->add_option("--threads", opt->threads, "server threads (keys in parallel)")
      ->capture_default_str();
  cmd->add_option("--keys", opt->keys, "keys the model is split into")->capture_default_str();
  cmd->add_flag("--json", opt->json, "one JSON object per codec on stdout, nothing else");
  cmd->callback([opt] { RunTransport(*opt); });
}

}  // namespace gradpress::bench
