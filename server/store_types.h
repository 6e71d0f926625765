#pragma once
// The parameter store's options and results (server/parameter_store.h is the store).
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "server/membership.h"
#include "server/sgd.h"

namespace gradpress::server {

using compressors::KeyPayload;
using compressors::TensorSpec;

struct StoreOptions {
  int workers = 2;                // workers expected to register
  int shard = 0, shards = 1;      // this server is shard `shard` of `shards` (--shard/--shards)
  bool async = false;             // sync barrier, or apply each push at once
  bool exchange_weights = false;  // server steps SGD and returns weights (methods 1-2)
  SgdOptions sgd;                 // used when exchange_weights
  CodecSpec pull;                 // codec (+ error feedback) of what the server returns
  int64_t min_numel = 1024;       // smaller tensors travel uncompressed
  bool skip_1d = false;           // 1-D tensors (bias, BN) travel uncompressed
  int stats_every = 100;          // steps between counter log lines; 0 = never
  double worker_timeout_s = 30;   // silence after which a worker leaves the barrier
  int max_staleness = 4;          // async: steps a push's base may lag
  int threads = 2;                // keys decoded / encoded in parallel
  std::string checkpoint_dir;     // "" = no checkpoints
  int64_t checkpoint_every = 0;   // server steps between checkpoints; 0 = on Stop only
  int checkpoint_keep = 3;        // newest checkpoint files kept
  int64_t max_model_bytes = int64_t{4096} << 20;      // a larger first Register is refused
  uint64_t max_broadcast_bytes = uint64_t{64} << 20;  // a larger Broadcast value is refused
  // Sync gradient methods: also step these weights with shadow_sgd on each step's mean (the
  // workers' own update: their optimizer, or lr 1 for method 6's averaged deltas), so that
  // Weights() serves what the workers hold -- a lone restarted worker pulls it.
  bool shadow_weights = false;
  SgdOptions shadow_sgd;  // its lr is replaced by a push's lr when one is sent
};

// What a worker says of the shard it registers with (RegisterRequest.shard, shards,
// placement_hash, catch_up_step); shards 0 = an unsharded client.
struct ShardClaim {
  int shard = 0;
  int shards = 0;
  uint64_t placement_hash = 0;
  int64_t catch_up_step = 0;  // > the shard's step: bring a restarted shard to the job's step
};

struct RegisterResult {
  int rank = 0;
  int world_size = 0;
  int64_t server_step = 0;
  bool initialized = false;
};

// One step's result, encoded once and shared by every worker that asks for it.
struct StepResult {
  int64_t step = 0;                  // the step this result completes (its index, 0-based)
  int contributors = 0;              // pushes averaged into it
  double server_ms = 0;              // time to finalize (mean, optimizer, encode)
  std::vector<KeyPayload> payloads;  // model order
  uint64_t PayloadBytes() const;
};

struct PushPullResult {
  std::shared_ptr<const StepResult> result;
  double wait_ms = 0;      // time this push waited for the other workers
  double apply_ms = 0;     // validate + decode + accumulate
  bool duplicate = false;  // the push had been applied before
};

struct StoreStats {
  int64_t steps = 0;
  uint64_t bytes_in = 0;   // payload bytes of applied pushes
  uint64_t bytes_out = 0;  // payload bytes sent (counted by the transport)
  int live_workers = 0;
  std::map<std::string, uint64_t> rejected;  // by reason
  // Pushes in a completed step: sync, the contributors of each bucket's finalized lane (a push
  // into a step the process did not complete is not counted); async, each applied push. Never
  // a duplicate. scripts/soak.sh checks it against the steps the workers logged.
  uint64_t pushes_applied = 0;
  uint64_t duplicates = 0;       // pushes of an applied (worker, incarnation, step): acknowledged
  uint64_t faults_injected = 0;  // calls answered UNAVAILABLE by the server's fault injector
  double mean_server_ms = 0;     // apply + finalize per step, mean
  int staging_buffers = 0;       // dense staging buffers allocated, all lanes (sparse need none)
  int weights_waiting = 0;       // workers waiting for the initial weights (PullWeights wait_init)
  std::string Prometheus() const;
};

}  // namespace gradpress::server
