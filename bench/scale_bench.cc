// gradpress-bench scale-worker: one synthetic worker for the scaling curve (scripts/scale.sh).
// The real client (sharded over --servers, the codecs of --codec) pushes the same random
// gradients every step and receives the step's result in the same call, as the Trainer does
// without overlap (one PushPull a step), with no training compute, and prints its median
// times as one JSON object:
//
//   gradpress-bench scale-worker --servers 10.214.0.1:5000,10.214.0.2:5000 --rank 0
//       --workers 8 --numel 4194304 --codec none --steps 5     (one command line)
//   {"rank":0,"workers":8,"servers":2,"codec":"none","model_mb":16,"step_ms":..,
//    "wait_ms":..,"network_ms":..,"imbalance":1.0}
//
// wait_ms is the server's barrier wait (for every worker's push), network_ms the call's wall
// time less that wait and the server's work (StepMetrics). With --ready-file and --go-file
// the worker writes the first after its warm-up steps and waits (up to 10 min) for the second
// to exist before the measured ones: scale.sh reads the servers' CPU time between them, so
// registration, the initial weights and warm-up are not counted per step.
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench.h"
#include "common/error.h"
#include "common/json_line.h"
#include "common/timer.h"
#include "compressors/registry.h"
#include "worker/client/grpc_ps_client.h"
#include "worker/client/sharded_ps_client.h"

namespace gradpress::bench {
namespace {

struct ScaleOptions {
  std::vector<std::string> servers;
  int rank = 0, workers = 1, keys = 8, steps = 5, warmup = 1;
  int64_t numel = int64_t{1} << 22;
  double partition_mb = 4;
  std::string codec = "none";
  std::string ready_file, go_file;  // the measured steps start once go_file exists
  bool print_codec = false;
};

// Writes `ready` and waits for `go` to exist (both "" = no handshake).
void Handshake(const std::string& ready, const std::string& go) {
  if (!ready.empty()) std::ofstream(ready) << "ready\n";
  if (go.empty()) return;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(10);
  while (!std::filesystem::exists(go)) {
    GP_ENFORCE(std::chrono::steady_clock::now() < deadline, "--go-file ", go,
               " did not appear within 10 minutes");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void RunScaleWorker(const ScaleOptions& o) {
  if (o.print_codec) {  // the codec as a YAML block, for the servers' `--set pull=...`
    YAML::Emitter e;
    e << YAML::Flow;
    EmitCodecSpec(e, ParseCodecShorthand(o.codec));
    std::printf("%s\n", e.c_str());
    return;
  }
  GP_ENFORCE(!o.servers.empty(), "--servers is required");
  GP_ENFORCE(o.workers >= 1 && o.rank >= 0 && o.rank < o.workers, "--rank ", o.rank,
             " outside [0, --workers ", o.workers, ")");
  GP_ENFORCE(o.keys >= 1 && o.numel >= 256 * o.keys, "--numel must be at least 256 x --keys");
  GP_ENFORCE(o.steps >= 1 && o.warmup >= 0, "--steps >= 1 and --warmup >= 0");
  compressors::RegisterBuiltinCompressors();
  torch::set_num_threads(1);
  worker::ClientOptions co;
  co.worker_id = "worker-" + std::to_string(o.rank);
  co.config_hash = "scale";
  co.push = ParseCodecShorthand(o.codec);
  co.min_numel = 0;
  co.deadline_s = 900;
  worker::ShardedPsClient client(
      co, o.servers, o.partition_mb,
      [](const worker::ClientOptions& c,
         worker::KeyCodecs* codecs) -> std::unique_ptr<worker::GrpcPsClient> {
        return std::make_unique<worker::GrpcPsClient>(c, codecs);
      });
  // K keys of [rows, 256] floats, the same on every worker.
  std::vector<compressors::TensorSpec> specs;
  std::vector<torch::Tensor> params, grads, out;
  auto gen = at::detail::createCPUGenerator(1000 + o.rank);
  for (int k = 0; k < o.keys; ++k) {
    const int64_t rows = o.numel / o.keys / 256;
    specs.push_back({"k" + std::to_string(k), {rows, 256}});
    params.push_back(torch::zeros({rows, 256}));
    grads.push_back(torch::randn({rows, 256}, gen));
    out.push_back(torch::zeros({rows, 256}));
  }
  client.Register(specs);
  client.InitOrPull(&params);
  std::vector<double> step, wait, network;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    if (s == o.warmup) Handshake(o.ready_file, o.go_file);
    Timer t;
    const worker::StepMetrics m = client.PushPull(s, grads, &out);
    if (s < o.warmup) continue;
    step.push_back(t.ElapsedMs());
    wait.push_back(m.wait_ms);
    network.push_back(m.network_ms);
  }
  std::printf("%s\n", JsonLine()
                          .Int("rank", o.rank)
                          .Int("workers", o.workers)
                          .Int("servers", static_cast<int64_t>(o.servers.size()))
                          .Str("codec", o.codec)
                          .Num("model_mb", 4.0 * (o.numel / o.keys / 256 * 256 * o.keys) / 1e6)
                          .Num("step_ms", Median(step))
                          .Num("wait_ms", Median(wait))
                          .Num("network_ms", Median(network))
                          .Num("imbalance", client.placement().Imbalance())
                          .Done()
                          .c_str());
}

}  // namespace

void AddScaleCommand(CLI::App& app) {
  auto opt = std::make_shared<ScaleOptions>();
  CLI::App* cmd = app.add_subcommand(
      "scale-worker",
      "one synthetic worker of the scaling curve (scripts/scale.sh): real client and codecs, "
      "random gradients, no training compute; prints its median step, push and pull ms");
  cmd->add_option("--servers", opt->servers, "shard addresses, in shard order")->delimiter(',');
  cmd->add_option("--rank", opt->rank, "this worker's rank");
  cmd->add_option("--workers", opt->workers, "workers in the job");
  cmd->add_option("--numel", opt->numel, "float32 elements in the model");
  cmd->add_option("--keys", opt->keys, "tensors the model is split into");
  cmd->add_option("--codec", opt->codec, "push codec spec, e.g. 'topk then=qsgd levels=16'");
  cmd->add_option("--steps", opt->steps, "measured steps");
  cmd->add_option("--warmup", opt->warmup, "steps before measuring");
  cmd->add_option("--partition-mb", opt->partition_mb, "cluster.partition_mb");
  cmd->add_option("--ready-file", opt->ready_file, "written when the warm-up steps are done");
  cmd->add_option("--go-file", opt->go_file, "the measured steps wait for this file to exist");
  cmd->add_flag("--print-codec", opt->print_codec,
                "print --codec as the YAML block a server's --set pull= takes, and exit");
  cmd->callback([opt] { RunScaleWorker(*opt); });
}

}  // namespace gradpress::bench
