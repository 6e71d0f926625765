// gradpress-bench lock: how long Heartbeat and Register take while the server works. The
// store's lock guards bookkeeping only (server/store_state.h): a bucket's finalize (mean,
// shadow step, pull encode of 25M floats) and a checkpoint's copy and fsync run without it,
// so these calls should not wait for them. A server built before that change, passed as
// --baseline-server, is measured in the same run.
//
//   gradpress-bench lock [--server PATH] [--baseline-server PATH] [--config FILE]
//                        [--numel N] [--keys K] [--steps S] [--rounds R] [--interval-ms M]
//                        [--checkpoint-every C] [--json]
//   gradpress-bench lock --baseline-server /tmp/gradpress-server-before-lock
//
// A round starts a gradpress-server (bench/server_process.h; --server, else $GRADPRESS_SERVER,
// else the build tree's) on the method-5 config (default configs/lenet_fmnist_m5.yaml: push
// and pull "topk ratio=0.01 error_feedback=true then=qsgd levels=16", shadow weights), with 2
// workers, checkpoints every C steps (0: none) and the bench's RPC deadline. Two GrpcPsClient
// workers run as threads: Register, InitOrPull, a warm-up step, then S PushPull steps of the
// config's push codec on N float32 in K keys (randn * 0.01, fixed seeds). While those S steps
// run, a third GrpcPsClient -- worker-0 again, so its Register is a no-op -- sends a Heartbeat
// or a Register, alternately, every M ms (a slot missed while a call was out is skipped), and
// times each round trip from send to reply. With a baseline, rounds alternate baseline and
// server, R of each; a binary's figures pool its rounds: p50, p99 and max of each call kind
// and of both, the median and mean step ms (the mean counts a step held up by a checkpoint),
// and how late the probe itself woke for its sends (p99: the machine's noise, not the
// server's). --json: one object per binary, nothing else on stdout.
#include <torch/torch.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench/barrier.h"
#include "bench/bench.h"
#include "bench/flat_model.h"
#include "bench/server_process.h"
#include "common/config.h"
#include "common/error.h"
#include "common/logging.h"
#include "compressors/registry.h"
#include "worker/client/grpc_ps_client.h"

namespace gradpress::bench {
namespace {

using Clock = std::chrono::steady_clock;
using compressors::TensorSpec;

constexpr uint64_t kSeed = 20240601;
constexpr int kWorkers = 2;

struct LockOptions {
  std::string server, baseline;
  std::string config = "configs/lenet_fmnist_m5.yaml";
  int64_t numel = 25'000'000;
  int keys = 10;
  int steps = 20;
  int rounds = 2;
  double interval_ms = 2;
  int checkpoint_every = 10;
  bool json = false;
};

// One binary's calls and steps, pooled over its rounds.
struct Measured {
  std::string label, path;
  std::vector<double> heartbeat_ms, register_ms, step_ms;
  std::vector<double> late_ms;  // the probe's sends after their slot: its own wake-up delay
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

double Mean(const std::vector<double>& v) {
  double sum = 0;
  for (double x : v) sum += x;
  return v.empty() ? std::nan("") : sum / static_cast<double>(v.size());
}

// Nearest rank: the smallest sample with at least q of them at or below it.
double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return std::nan("");
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size(), std::max<size_t>(rank, 1)) - 1];
}

std::vector<TensorSpec> Model(const LockOptions& opt) {
  return FlatModel(opt.numel, opt.keys, "layer");
}

// One round on m->path: its calls and steps are appended to *m.
void RunRound(const LockOptions& opt, const Config& job, const std::string& dir, int round,
              const std::vector<std::vector<torch::Tensor>>& grads, Measured* m) {
  const std::string port_file = dir + "/port-" + std::to_string(round);
  const std::string deadline = std::to_string(static_cast<int>(kRpcDeadlineS));
  std::vector<std::string> args = {m->path, "--config", opt.config, "--listen", "127.0.0.1:0"};
  args.insert(args.end(), {"--port-file", port_file, "--log-level", "warn", "--workers",
                           std::to_string(kWorkers)});
  args.insert(args.end(), {"--set", "server.deadline_s=" + deadline, "--set",
                           "server.worker_timeout_s=" + deadline});
  if (opt.checkpoint_every > 0) {
    args.insert(args.end(), {"--checkpoint-dir", dir + "/ckpt-" + std::to_string(round), "--set",
                             "train.checkpoint_every=" + std::to_string(opt.checkpoint_every)});
  }
  ServerProcess server(args);
  const int port = server.WaitForPort(port_file);
  const std::vector<TensorSpec> model = Model(opt);
  auto options = [&](int w, bool probe) {
    worker::ClientOptions o;
    o.server = "127.0.0.1:" + std::to_string(port);
    o.worker_id = "worker-" + std::to_string(w);
    if (!probe) o.push = job.push;  // the probe pushes nothing: no codec state
    o.min_numel = job.compress.min_numel;
    o.skip_1d = job.compress.skip_1d;
    o.deadline_s = kRpcDeadlineS;
    o.max_retries = 1;
    return o;
  };
  Barrier start(kWorkers + 1);  // the workers' warm-up done, the probe registered
  std::atomic<int> running{kWorkers};
  std::vector<std::vector<double>> step_ms(kWorkers);
  std::vector<double> heartbeat_ms, register_ms, late_ms;
  std::string first_error;
  std::mutex error_mu;
  auto fail = [&](const std::string& who, const std::exception& e) {
    std::lock_guard<std::mutex> lock(error_mu);
    if (first_error.empty()) {
      first_error = who + ": " + e.what();
      const std::string how = server.EndedHow();
      if (!how.empty()) first_error += " (the server had ended: " + how + ")";
    }
    start.Break();
    running = 0;
    server.Kill();  // ends the other calls at once
  };
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      try {
        worker::GrpcPsClient client(options(w, false));
        client.Register(model);
        const torch::Tensor flat = torch::zeros({opt.numel});
        std::vector<torch::Tensor> out = SplitFlat(flat, model);
        client.InitOrPull(&out);
        client.PushPull(0, grads[w], &out);  // warm-up: first allocations on both sides
        start.Wait();
        for (int64_t step = 1; step <= opt.steps; ++step) {
          const Clock::time_point t = Clock::now();
          client.PushPull(step, grads[w], &out);
          step_ms[w].push_back(Ms(Clock::now() - t));
        }
        --running;
      } catch (const std::exception& e) {
        fail("worker-" + std::to_string(w), e);
      }
    });
  }
  threads.emplace_back([&] {
    try {
      worker::GrpcPsClient probe(options(0, true));
      probe.Register(model);
      const auto interval = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double, std::milli>(opt.interval_ms));
      Clock::time_point next = start.Wait();
      for (uint64_t i = 0; running > 0; ++i) {
        std::this_thread::sleep_until(next);
        const Clock::time_point sent = Clock::now();
        if (i % 2 == 0) {
          probe.Heartbeat();
        } else {
          probe.Register(model);
        }
        const Clock::time_point done = Clock::now();
        (i % 2 == 0 ? heartbeat_ms : register_ms).push_back(Ms(done - sent));
        late_ms.push_back(Ms(sent - next));
        next = std::max(next + interval, done);
      }
    } catch (const std::exception& e) {
      fail("probe", e);
    }
  });
  for (auto& t : threads) t.join();
  if (!first_error.empty()) throw std::runtime_error(first_error);
  server.Terminate();
  for (const auto& s : step_ms) m->step_ms.insert(m->step_ms.end(), s.begin(), s.end());
  m->heartbeat_ms.insert(m->heartbeat_ms.end(), heartbeat_ms.begin(), heartbeat_ms.end());
  m->register_ms.insert(m->register_ms.end(), register_ms.begin(), register_ms.end());
  m->late_ms.insert(m->late_ms.end(), late_ms.begin(), late_ms.end());
  std::cerr << "  round " << round << " " << m->label << ": " << heartbeat_ms.size()
            << " heartbeats, p99 " << Percentile(heartbeat_ms, 0.99) << " ms; "
            << register_ms.size() << " registers, p99 " << Percentile(register_ms, 0.99)
            << " ms; step " << Median(step_ms[0]) << " ms; probe late p99 "
            << Percentile(late_ms, 0.99) << " ms\n";
}

std::vector<double> Both(const Measured& m) {
  std::vector<double> all = m.heartbeat_ms;
  all.insert(all.end(), m.register_ms.begin(), m.register_ms.end());
  return all;
}

void PrintJson(const LockOptions& opt, const std::string& codec, const Measured& m) {
  const std::vector<double> all = Both(m);
  std::cout << "{\"server\":" << JsonString(m.label) << ",\"path\":" << JsonString(m.path)
            << ",\"numel\":" << opt.numel << ",\"keys\":" << opt.keys << ",\"workers\":" << kWorkers
            << ",\"codec\":" << JsonString(codec) << ",\"steps\":" << opt.steps
            << ",\"rounds\":" << opt.rounds << ",\"interval_ms\":" << JsonNumber(opt.interval_ms)
            << ",\"checkpoint_every\":" << opt.checkpoint_every << ",\"calls\":" << all.size();
  auto row = [&](const char* name, const std::vector<double>& v) {
    std::cout << ",\"" << name << "_p50_ms\":" << JsonNumber(Percentile(v, 0.5)) << ",\"" << name
              << "_p99_ms\":" << JsonNumber(Percentile(v, 0.99)) << ",\"" << name
              << "_max_ms\":" << JsonNumber(Percentile(v, 1.0));
  };
  row("heartbeat", m.heartbeat_ms);
  row("register", m.register_ms);
  std::cout << ",\"p50_ms\":" << JsonNumber(Percentile(all, 0.5))
            << ",\"p99_ms\":" << JsonNumber(Percentile(all, 0.99))
            << ",\"max_ms\":" << JsonNumber(Percentile(all, 1.0))
            << ",\"step_ms\":" << JsonNumber(Median(m.step_ms))
            << ",\"step_mean_ms\":" << JsonNumber(Mean(m.step_ms))
            << ",\"probe_late_p99_ms\":" << JsonNumber(Percentile(m.late_ms, 0.99)) << "}"
            << std::endl;
}

void PrintTable(const LockOptions& opt, const std::string& codec,
                const std::vector<Measured>& rows) {
  std::printf(
      "numel %lld in %d keys, %d workers, push/pull %s; %d steps x %d rounds per binary; a call "
      "every %.3g ms; checkpoint every %d steps; ms from send to reply\n",
      static_cast<long long>(opt.numel), opt.keys, kWorkers, codec.c_str(), opt.steps, opt.rounds,
      opt.interval_ms, opt.checkpoint_every);
  std::printf("%-8s  %6s  %21s  %21s  %21s  %16s  %8s  %s\n", "server", "calls",
              "heartbeat p50/p99/max", "register p50/p99/max", "both p50/p99/max",
              "step ms med/mean", "late p99", "binary");
  for (const Measured& m : rows) {
    auto cell = [](const std::vector<double>& v) {
      char b[64];
      std::snprintf(b, sizeof(b), "%.2f/%.2f/%.1f", Percentile(v, 0.5), Percentile(v, 0.99),
                    Percentile(v, 1.0));
      return std::string(b);
    };
    const std::vector<double> all = Both(m);
    char steps[32];
    std::snprintf(steps, sizeof(steps), "%.1f/%.1f", Median(m.step_ms), Mean(m.step_ms));
    std::printf("%-8s  %6zu  %21s  %21s  %21s  %16s  %8.2f  %s\n", m.label.c_str(), all.size(),
                cell(m.heartbeat_ms).c_str(), cell(m.register_ms).c_str(), cell(all).c_str(), steps,
                Percentile(m.late_ms, 0.99), m.path.c_str());
  }
}

void RunLock(LockOptions opt) {
  GP_ENFORCE(opt.numel >= 1 && opt.numel <= std::numeric_limits<int32_t>::max(),
             "--numel must be in [1, 2^31 - 1], got ", opt.numel);
  GP_ENFORCE(opt.keys >= 1 && opt.keys <= opt.numel, "--keys must be in [1, numel], got ",
             opt.keys);
  GP_ENFORCE(opt.steps >= 1 && opt.steps <= 100000, "--steps must be in [1, 100000], got ",
             opt.steps);
  GP_ENFORCE(opt.rounds >= 1 && opt.rounds <= 100, "--rounds must be in [1, 100], got ",
             opt.rounds);
  GP_ENFORCE(opt.interval_ms > 0 && opt.interval_ms <= 1000,
             "--interval-ms must be in (0, 1000], got ", opt.interval_ms);
  GP_ENFORCE(opt.checkpoint_every >= 0, "--checkpoint-every must be >= 0, got ",
             opt.checkpoint_every);
  const Config job = LoadConfig(opt.config);  // the workers' side of it: push codec, min_numel
  GP_ENFORCE(job.sync.mode == "sync", opt.config, ": the bench runs sync steps, not ",
             job.sync.mode);
  compressors::RegisterBuiltinCompressors();
  compressors::MakeCompressor(job.push);  // a bad codec fails before anything runs
  std::vector<Measured> rows;
  auto add = [&](const std::string& label, const std::string& path) {
    rows.emplace_back();
    rows.back().label = label;
    rows.back().path = path;
  };
  if (!opt.baseline.empty()) add("baseline", opt.baseline);
  add("server", opt.server.empty() ? ServerBinary() : opt.server);
  for (const Measured& m : rows) {
    GP_ENFORCE(std::filesystem::exists(m.path), "no server binary at ", m.path);
  }
  try {
    SetupLogging("warn", "", "bench");  // client retry warnings to stderr, never stdout
    torch::set_num_threads(1);
    std::vector<std::vector<torch::Tensor>> grads;
    for (int w = 0; w < kWorkers; ++w) {
      auto gen = at::detail::createCPUGenerator(kSeed + w);
      grads.push_back(SplitFlat((torch::randn({opt.numel}, gen) * 0.01f).contiguous(), Model(opt)));
    }
    std::cerr << "gradpress-bench lock: " << opt.config << ", numel=" << opt.numel
              << " keys=" << opt.keys << " steps=" << opt.steps << " rounds=" << opt.rounds
              << " interval=" << opt.interval_ms << " ms checkpoint_every=" << opt.checkpoint_every
              << "\n";
    std::string dir_template = (std::filesystem::temp_directory_path() / "gp-lock-XXXXXX");
    GP_ENFORCE_AS(Internal, ::mkdtemp(dir_template.data()) != nullptr, "mkdtemp failed");
    struct RemoveDir {
      std::string path;
      ~RemoveDir() {
        std::error_code ec;
        std::filesystem::remove_all(path, ec);
      }
    } dir{dir_template};
    int round = 0;
    for (int r = 0; r < opt.rounds; ++r) {
      for (Measured& m : rows) RunRound(opt, job, dir.path, round++, grads, &m);
    }
    const std::string codec = job.push.ToString() + " / " + job.pull.ToString();
    if (opt.json) {
      for (const Measured& m : rows) PrintJson(opt, codec, m);
    } else {
      PrintTable(opt, codec, rows);
    }
  } catch (const std::exception& e) {  // a failed measurement, not bad input: exit 1
    throw std::runtime_error(std::string("lock: ") + e.what());
  }
}

}  // namespace

void AddLockCommand(CLI::App& app) {
  auto opt = std::make_shared<LockOptions>();
  CLI::App* cmd = app.add_subcommand(
      "lock",
      "Heartbeat and Register latency (p50/p99/max) while two workers run method-5 steps, "
      "against a baseline server binary in the same run");
  cmd->add_option("--server", opt->server,
                  "gradpress-server to measure (default: $GRADPRESS_SERVER, else the build's)");
  cmd->add_option("--baseline-server", opt->baseline,
                  "a gradpress-server to compare with, rounds alternating");
  cmd->add_option("--config", opt->config, "the job's YAML (method 5)")->capture_default_str();
  cmd->add_option("--numel", opt->numel, "float32 elements in the model")->capture_default_str();
  cmd->add_option("--keys", opt->keys, "keys the model is split into")->capture_default_str();
  cmd->add_option("--steps", opt->steps, "measured steps per round, after a warm-up")
      ->capture_default_str();
  cmd->add_option("--rounds", opt->rounds, "rounds per binary")->capture_default_str();
  cmd->add_option("--interval-ms", opt->interval_ms, "ms between the probe's scheduled calls")
      ->capture_default_str();
  cmd->add_option("--checkpoint-every", opt->checkpoint_every,
                  "server checkpoint every this many steps (0: none)")
      ->capture_default_str();
  cmd->add_flag("--json", opt->json, "one JSON object per server binary on stdout, nothing else");
  cmd->callback([opt] { RunLock(*opt); });
}

}  // namespace gradpress::bench
