#include "server/server_options.h"

#include "compressors/compressor_config.h"

namespace gradpress::server {

StoreOptions StoreOptionsFromConfig(const Config& c) {
  StoreOptions o;
  o.workers = c.cluster.workers;
  o.shards = std::max<int>(1, c.cluster.servers.size());  // this one's index: --shard
  o.async = c.sync.mode == "async";
  o.exchange_weights = c.sync.exchange == "weights";
  o.sgd = {c.train.lr, c.train.momentum, c.train.weight_decay, c.train.nesterov};
  o.pull = c.pull;
  o.min_numel = c.compress.min_numel;
  o.skip_1d = c.compress.skip_1d;
  o.worker_timeout_s = c.server.worker_timeout_s;
  o.max_model_bytes = static_cast<int64_t>(c.server.max_model_mb) << 20;
  o.max_broadcast_bytes = static_cast<uint64_t>(c.server.max_broadcast_mb) << 20;
  o.max_staleness = c.sync.max_staleness;
  o.threads = c.server.threads;
  o.stats_every = c.server.stats_every;
  o.checkpoint_every = c.train.checkpoint_every;
  o.checkpoint_keep = c.train.checkpoint_keep;
  o.shadow_weights =
      c.server.shadow_weights && c.sync.mode == "sync" && c.sync.exchange == "gradients";
  const bool dgc = c.compress.momentum_correction > 0;  // momentum inside the push codec
  if (c.sync.every > 1) {
    o.shadow_sgd = {1.0, 0.0, 0.0, false};  // method 6: anchor -= mean(anchor - weights)
  } else {
    o.shadow_sgd = {c.train.lr, dgc ? 0.0 : c.train.momentum, c.train.weight_decay,
                    !dgc && c.train.nesterov};
  }
  return o;
}

}  // namespace gradpress::server
