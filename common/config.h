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

namespace gradpress {

struct DatasetConfig {
  std::string name = "fashion-mnist";  // fashion-mnist | mnist | cifar10 | synthetic
  std::string path = "/usr/share/datasets/fashion-mnist";
  int subset = 0;       // training images used; 0 = all
  int test_subset = 0;  // test images used; 0 = all
};

struct TrainConfig {
  int epochs = 2;
  int batch_size = 64;  // per worker
  double lr = 0.01;
  double momentum = 0.9;
  double weight_decay = 0;
  bool nesterov = false;
  int seed = 42;
  std::string lr_schedule = "none";  // none | step | cosine
  double warmup_epochs = 0;          // linear warm-up from 0, in (fractional) epochs
  int lr_step_epochs = 0;            // step: lr *= lr_gamma every this many epochs (>= 1)
  double lr_gamma = 0.1;
  int threads = 1;           // intra-op threads per worker
  int log_every = 50;        // steps between log lines; 0 = never
  int checkpoint_every = 0;  // server steps between checkpoints; 0 = only at the end
  int checkpoint_keep = 3;   // newest checkpoint files kept per process
};

struct ClusterConfig {
  std::string server = "127.0.0.1:50051";  // host:port the workers dial
  int workers = 2;
  // Sharded servers: shard i at servers[i] (empty: the one cluster.server). In YAML a list,
  // on the command line "a:1,b:2" or "[a:1, b:2]".
  std::vector<std::string> servers;
  // Tensors over this many MiB are cut into partitions, each a key of its own, whatever the
  // number of servers (<= 0: never cut); see transport/placement.h.
  double partition_mb = 4;
};

struct SyncConfig {
  std::string mode = "sync";             // sync | async
  std::string exchange = "gradients";    // gradients | weights | gaussian (what comes back;
                                         // gaussian: per-key mean and std only, see trainer.h)
  int every = 1;                         // steps between syncs (method 6: 20)
  int max_staleness = 4;                 // async: oldest push accepted, in steps
  std::string model_selection = "best";  // best | average: the per-epoch rule of method 6
  // The pipelined step (worker/bucket_exchange.h; methods 1-5 in sync mode): gradients go out
  // in buckets of about bucket_mb MiB, each as soon as backward has produced it (overlap), and
  // the server completes each bucket on its own. overlap: false = the serial step.
  bool overlap = true;
  // With overlap: the step ends when backward does, and the next forward waits layer by layer
  // for its buckets' results (BytePS's cross-barrier). false: the step waits for every bucket.
  bool cross_barrier = true;
  double bucket_mb = 4;
};

// Dynamic compression (worker/compression_schedule.h): the push codec moves along `ladder`
// (codec specs separated by '|', fewest bits first) when training stalls.
struct DynamicCompressionConfig {
  std::string ladder;            // "" = off
  double acc_threshold = 0.005;  // test-accuracy gain per epoch below which a rung stalls
  double loss_threshold = 0.02;  // relative train-loss decrease per epoch, likewise
  int patience = 4;              // epochs on one rung before compression is removed
  int uncompressed_epochs = 1;   // epochs without compression after that
};

struct CompressConfig {
  int min_numel = 1024;  // smaller tensors travel uncompressed
  bool skip_1d = false;  // 1-D tensors (bias, BN) travel uncompressed
  // Deep Gradient Compression (Lin et al. 2018) on the push side:
  double momentum_correction = 0;  // > 0: the momentum applied inside the push codec (DGC);
                                   //   the local optimizer then runs without momentum
  double clip_norm = 0;            // > 0: clip each worker's gradient to clip_norm/sqrt(N)
  int warmup_epochs = 0;           // sparsity warm-up: density max(ratio, 0.25^(e+1))
  DynamicCompressionConfig dynamic;
};

struct ServerConfig {
  std::string listen = "0.0.0.0:50051";    // host:port; port 0 picks a free one
  int threads = 2;                         // aggregation threads
  double worker_timeout_s = 30;            // silent this long -> dropped from the barrier
  int stats_every = 100;                   // steps between stats log lines; 0 = never
  int metrics_port = 0;                    // HTTP: Prometheus /metrics and the dashboard; 0 = off
  std::string metrics_host = "127.0.0.1";  // the address it binds (0.0.0.0: every interface)
  double deadline_s = 120;                 // RPC deadline
  int max_model_mb = 4096;                 // largest model (float32 MB) a first Register may
                                           // declare: the server allocates ~5x this
  bool shadow_weights = true;  // gradient methods: the server keeps the workers' weights too
                               // (the same SGD on the same mean), so a lone restarted
                               // worker can pull them; costs one SGD pass per step
};

// Transport security (transport/security.h). Files are read when a server or client is built,
// each by the side that needs it; an unreadable one is an InvalidArgument naming the key.
struct SecurityConfig {
  bool tls = false;       // TLS on the ParameterServer port (and for the workers' channels)
  std::string cert;       // server: PEM certificate chain
  std::string key;        // server: PEM private key
  std::string ca;         // worker: PEM of the CA that signed the server's cert; "" = system roots
  std::string client_ca;  // server: require client certs signed by this CA (mutual TLS)
  std::string client_cert;  // worker: PEM certificate for mutual TLS
  std::string client_key;   // worker: PEM private key for mutual TLS
  std::string server_name;  // worker: TLS target name override; "" = host of the address
  std::string token_file;   // file whose trimmed content is the bearer token; $GRADPRESS_TOKEN
                            // overrides it; neither = no token
  bool allow_plaintext_token = false;  // permit a bearer token without TLS (warned at start)
};

// Injected faults (transport/fault_injection.h); $GRADPRESS_FAULTS overrides key by key.
// Fractions are probabilities per RPC attempt, in [0, 1]; all 0 = off.
struct FaultsConfig {
  double drop = 0;        // worker: the request is lost before it is sent
  double drop_reply = 0;  // worker: the call runs, then its reply is lost (a duplicate retry)
  double delay = 0;       // worker: the attempt first sleeps delay_ms
  int delay_ms = 20;
  double fail = 0;  // server: answer UNAVAILABLE without touching the store
  int seed = 1;     // the draws are deterministic per seed (and worker id)
};

struct OutputConfig {
  std::string dir = "runs";  // runs go to <dir>/<name>/<timestamp>/
};

struct Config {
  std::string name = "experiment";  // no '/'
  std::string model = "lenet";      // lenet | vgg11 | resnet18 | resnet20
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
