// gradpress-bench transport: push / pull throughput of the parameter server over gRPC, with
// the server alone in its own process, against plain TCP loopback measured in the same run.
//
//   gradpress-bench transport [--numel N] [--workers W] [--steps S] [--codec SPEC]...
//                             [--threads T] [--keys K] [--json]
//   gradpress-bench transport --numel 62000 --steps 20   # LeNet size: server_step_ms <= 2?
//
// Per codec the bench re-executes itself as the hidden `transport-server` subcommand (a
// ServerRunner on 127.0.0.1:0 that writes its port to a file and runs until SIGTERM), then
// runs W PsClients as threads in lock step. Step s: barrier, every worker Push(s, grads);
// barrier, every worker Pull(&out, s). A phase lasts from the barrier's release until the
// last worker's call returned. Step 0 is a warm-up; S measured steps follow.
// push_gbps = W * 4 N / median push phase seconds / 1e9 (pull likewise); step_ms = median of
// push + pull; server_rss_mb = the server's VmHWM; server_step_ms = the server's apply +
// finalize ms per measured step (gradpress_step_server_ms); bytes_*_per_step = payload bytes
// per worker per step; tcp_gbps = median of 3 TCP transfers of W * 4 N bytes (tcp_loopback.h).
// Gradients: randn * 0.01 per worker, fixed seeds. Codec SPEC is used both ways (push and the
// server's pull codec), tensors of any size compressed (min_numel 0). Defaults: none, and
// method 5: "topk ratio=0.01 error_feedback=true then=qsgd levels=16".
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "bench/tcp_loopback.h"
#include "common/error.h"
#include "common/logging.h"
#include "compressors/registry.h"
#include "server/server_runner.h"
#include "worker/ps_client.h"

extern char** environ;

namespace gradpress::bench {
namespace {

using Clock = std::chrono::steady_clock;
using compressors::CompressorConfig;
using compressors::TensorSpec;

constexpr uint64_t kSeed = 20240601;
constexpr float kGradScale = 0.01f;
constexpr double kStartTimeoutS = 30;  // for the server's port file
constexpr double kRpcDeadlineS = 120;  // per RPC; also the server's worker timeout
constexpr int kMinReportSteps = 20;    // README figures need at least this many
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

struct ServerArgs {
  std::string port_file, spec = "none";
  int workers = 2, threads = 2;
  int64_t parent_pid = 0;
};

struct Row {
  std::string codec;  // CompressorConfig::ToString(): "none", "topk(ratio=0.01)+qsgd(...)+ef"
  double push_s = 0, pull_s = 0, step_s = 0;  // medians
  double rss_mb = 0, base_rss_mb = 0;         // server VmHWM; VmRSS before any worker
  double bytes_up = 0, bytes_down = 0;        // per worker per step
  double server_ms = 0;
  double encode_ms = 0, push_rpc_ms = 0, decode_ms = 0, pull_rpc_ms = 0;  // client, per call
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A reusable barrier for n threads; Wait returns the time the last thread arrived.
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  Clock::time_point Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      release_ = Clock::now();
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation || broken_; });
    }
    if (broken_) throw std::runtime_error("stopped: another worker failed");
    return release_;
  }
  void Break() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
  Clock::time_point release_;
};

// The server child process; killed and reaped on destruction, so it never outlives us.
// Thread-safety: one thread at a time (worker threads call Kill / EndedHow under a mutex).
class ServerProcess {
 public:
  explicit ServerProcess(const std::vector<std::string>& args) {
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, STDERR_FILENO, STDOUT_FILENO);  // stdout: ours
    const int rc = posix_spawn(&pid_, args[0].c_str(), &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      pid_ = -1;
      throw std::runtime_error("cannot start " + args[0] + ": " + std::strerror(rc));
    }
  }
  ~ServerProcess() {
    Kill();
    Reap(/*timeout_s=*/10);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  void Kill() const {
    if (pid_ > 0) ::kill(pid_, SIGKILL);
  }
  // "exit 3", "signal 9" once the child has ended; "" while it runs.
  std::string EndedHow() { return Reap(0) ? how_ : ""; }
  // Waits for the port file (written atomically by the child); throws if the child exits.
  int WaitForPort(const std::string& file) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(kStartTimeoutS);
    while (Clock::now() < deadline) {
      int port = 0;
      if (std::ifstream(file) >> port && port > 0) return port;
      if (Reap(0)) throw std::runtime_error("transport-server exited during start-up: " + how_);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    throw std::runtime_error("transport-server did not report a port within 30 s");
  }
  // A "VmHWM:"-style field of /proc/<pid>/status, in MiB.
  double StatusMb(const std::string& field) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind(field + ":", 0) == 0) return std::stod(line.substr(field.size() + 1)) / 1024;
    }
    throw std::runtime_error("no " + field + " in /proc/" + std::to_string(pid_) + "/status");
  }
  // SIGTERM, then SIGKILL after 10 s; notes an unclean exit on stderr.
  void Terminate() {
    if (pid_ > 0) ::kill(pid_, SIGTERM);
    if (!Reap(10)) {
      Kill();
      Reap(10);
    }
    if (how_ != "exit 0") std::cerr << "  note: transport-server ended with " << how_ << "\n";
  }

 private:
  // Waits up to timeout_s for the child to end; true once it has been reaped.
  bool Reap(double timeout_s) {
    const auto deadline = Clock::now() + std::chrono::duration<double>(timeout_s);
    while (pid_ > 0) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_ || (r < 0 && errno != EINTR)) {
        how_ = WIFEXITED(status)     ? "exit " + std::to_string(WEXITSTATUS(status))
               : WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                     : "unknown status";
        pid_ = -1;
        return true;
      }
      if (Clock::now() >= deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }
  pid_t pid_ = -1;
  std::string how_;
};

// ---- the server side (child process) ----

volatile std::sig_atomic_t g_stop = 0;
extern "C" void OnStopSignal(int) { g_stop = 1; }

void RunServer(const ServerArgs& a) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with the bench; then check we were not late
  if (static_cast<int64_t>(::getppid()) != a.parent_pid)
    throw std::runtime_error(
        "transport-server: the bench process that started it is gone (parent pid " +
        std::to_string(a.parent_pid) + ")");
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
  SetupLogging("warn", "", "transport-server");
  compressors::RegisterBuiltinCompressors();
  torch::set_num_threads(1);
  server::StoreOptions o;
  o.workers = a.workers;
  o.threads = a.threads;
  o.pull = ParseRowSpec(a.spec);
  o.min_numel = 0;
  o.worker_timeout_s = kRpcDeadlineS;
  server::ServerRunner runner(o, kRpcDeadlineS);
  const int port = runner.Start("127.0.0.1:0");
  const std::string tmp = a.port_file + ".tmp";
  std::ofstream(tmp) << port << "\n";
  std::filesystem::rename(tmp, a.port_file);
  while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  runner.Stop(2.0);
}

// ---- the bench side ----

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

// The model: `keys` 1-D keys that split numel; per worker tensors are views of one tensor.
std::vector<TensorSpec> Model(const TransportOptions& opt) {
  std::vector<TensorSpec> specs;
  for (int k = 0; k < opt.keys; ++k) {
    const int64_t len = opt.numel / opt.keys + (k == opt.keys - 1 ? opt.numel % opt.keys : 0);
    specs.push_back({"grad" + std::to_string(k), {len}});
  }
  return specs;
}

std::vector<torch::Tensor> Split(const torch::Tensor& flat, const std::vector<TensorSpec>& specs) {
  std::vector<torch::Tensor> parts;
  int64_t off = 0;
  for (const auto& s : specs) {
    parts.push_back(flat.narrow(0, off, s.shape[0]));
    off += s.shape[0];
  }
  return parts;
}

Row RunCodec(const TransportOptions& opt, const std::string& spec, const CompressorConfig& config,
             const std::string& port_file, const std::vector<std::vector<torch::Tensor>>& grads) {
  const int W = opt.workers, S = opt.steps;
  ServerProcess server({std::filesystem::read_symlink("/proc/self/exe").string(),
                        "transport-server", "--port-file", port_file, "--workers",
                        std::to_string(W), "--threads", std::to_string(opt.threads), "--codec",
                        spec, "--parent-pid", std::to_string(::getpid())});
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
    worker::PsClient client(o);
    client.Register(model);
    const torch::Tensor flat = torch::zeros({opt.numel});
    std::vector<torch::Tensor> out = Split(flat, model);
    client.InitOrPull(&out);
    for (int64_t step = 0; step <= S; ++step) {
      const Clock::time_point push_go = barrier.Wait();
      const worker::StepStats pushed = client.Push(step, grads[w]);
      push_end[w][step] = Clock::now();
      const Clock::time_point pull_go = barrier.Wait();
      const worker::StepStats pulled = client.Pull(&out, step);
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
  std::vector<CompressorConfig> configs;
  for (const auto& spec : specs) {
    configs.push_back(ParseRowSpec(spec));
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
          Split((torch::randn({opt.numel}, gen) * kGradScale).contiguous(), Model(opt)));
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

  auto args = std::make_shared<ServerArgs>();
  CLI::App* server = app.add_subcommand("transport-server", "server process of `transport`");
  server->group("");  // hidden: started by `transport` only
  server->add_option("--port-file", args->port_file)->required();
  server->add_option("--workers", args->workers)->required();
  server->add_option("--threads", args->threads)->required();
  server->add_option("--codec", args->spec)->required();
  server->add_option("--parent-pid", args->parent_pid)->required();
  server->callback([args] { RunServer(*args); });
}

}  // namespace gradpress::bench
