#pragma once
// The experiment config's sections (common/config.h: Config holds one of each), plain structs
// whose defaults are written here; the schema that reads them from YAML and checks every
// value is common/config_schema.cc, the cross-key rules common/config_rules.cc.
// Thread-safety: plain values.
#include <map>
#include <string>
#include <vector>

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

// Dynamic compression (worker/engine/compression_schedule.h): the push codec moves along `ladder`
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
  // compress.auto (worker/engine/auto_codecs.h): each key's push codec chosen at start among none,
  // fp16 and `push` by the step model for this link, from a calibration on this worker.
  bool auto_select = false;       // yaml: compress.auto
  double link_gbps = 0;           // the link the choice is for (needed with auto)
  double link_latency_ms = 0;     // one way
  std::string topology = "star";  // star: a shard's link carries its workers; links: one each
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
  int max_broadcast_mb = 64;   // largest value one worker broadcasts to the others (Broadcast)
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

}  // namespace gradpress
