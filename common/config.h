#pragma once
// The experiment config: one YAML file (schema and example: shared/DESIGN.md, "Configuration")
// plus Hydra-style overrides, resolved into plain structs whose defaults are written below.
//
//   Config c = LoadConfig("configs/lenet_fmnist_m5.yaml", {"train.lr=0.05", "push.then.levels=8"});
//   WriteResolvedConfig(c, run_dir + "/config.yaml");
//   Identity id = ResolveIdentity(rank_flag, workers_flag, server_flag, c);
//
// Every error is an InvalidArgument that says where and what:
//   config.yaml:7: unknown key 'train.learning_rate'; did you mean 'train.lr'?
//   config.yaml:9: train.lr: expected a number >= 0, got 'abc'
//   --set sync.mode=lazy: 'lazy' is not one of sync, async
// The codec blocks (push, pull) are kept as CodecSpec trees (common/codec_spec.h): their
// parameters are checked by the codec factory (compressors::MakeCompressor), not here.
// Thread-safety: plain values; ResolveIdentity reads the environment.
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/codec_spec.h"
#include "common/config_sections.h"

namespace gradpress {

struct Config {
  std::string name = "experiment";  // no '/'
  std::string model = "lenet";      // lenet | vgg11 | resnet18 | resnet20 | resnet8 | torchscript
  // torchscript: the module saved by torch.jit.script(model).save(path) (worker/models/
  // torchscript.h); YAML also takes `model: {name: torchscript, path: m.pt}`.
  std::string model_path;
  DatasetConfig dataset;
  std::string device = "auto";  // auto | cpu | cuda
  TrainConfig train;
  ClusterConfig cluster;
  SyncConfig sync;
  CodecSpec push;  // worker -> server
  CodecSpec pull;  // server -> worker
  CompressConfig compress;
  ServerConfig server;
  OutputConfig output;
  SecurityConfig security;
  FaultsConfig faults;
};
// Equal when ToYaml is equal (CodecSpec::line is ignored).
bool operator==(const Config& a, const Config& b);
bool operator!=(const Config& a, const Config& b);

// Reads `path`, then applies `overrides` in order ("train.lr=0.05", "push.then.levels=8",
// "push={codec: qsgd, levels: 8}" replaces a whole codec block, "push.then=null" drops one).
// In a codec block, a key other than codec / error_feedback / then is a codec parameter.
Config LoadConfig(const std::string& path, const std::vector<std::string>& overrides = {});
// The same from text; `source_name` stands for the file name in errors.
Config ParseConfig(const std::string& yaml_text, const std::string& source_name = "<config>",
                   const std::vector<std::string>& overrides = {});

// The resolved config, every key written: ParseConfig(ToYaml(c)) == c.
std::string ToYaml(const Config& config);
// Writes ToYaml(config) to `path` (temp file + rename); creates missing parent directories.
void WriteResolvedConfig(const Config& config, const std::string& path);
// 16 hex digits of FNV-1a 64 over ToYaml: workers of one job must agree on it. Every key
// counts, device and output.dir included, except the per-process transport settings
// (security.*, faults.*): workers may hold their own certificates and fault rates.
std::string ConfigHash(const Config& config);

struct Identity {
  int rank = 0;
  int workers = 1;
  std::string server;  // host:port
};
// rank:    flag, else $RANK, else $SLURM_PROCID, else 0.
// workers: flag, else $WORLD_SIZE, else $SLURM_NTASKS, else config.cluster.workers.
// server:  flag, else $GRADPRESS_SERVER, else config.cluster.server ($MASTER_PORT never).
// Empty variables count as unset. Throws InvalidArgument naming the flag or variable for a
// value that is not an integer / host:port, and for rank >= workers.
Identity ResolveIdentity(std::optional<int> rank_flag, std::optional<int> workers_flag,
                         std::optional<std::string> server_flag, const Config& config);

// A server's shard: --shard / --shards, else $GRADPRESS_SHARD / $GRADPRESS_SHARDS, else shard 0
// of max(1, cluster.servers' length). Throws InvalidArgument naming the flag or variable for
// a value that is not an integer, shards < 1 or shard outside [0, shards).
void ResolveShard(std::optional<int> shard_flag, std::optional<int> shards_flag,
                  const Config& config, int* shard, int* shards);
// The workers' shard servers: $GRADPRESS_SERVERS ("a:1,b:2") else cluster.servers (empty:
// one server, Identity::server). Checks every host:port.
std::vector<std::string> ResolveServers(const Config& config);

}  // namespace gradpress
