#pragma once
// Helpers shared by the trainer tests: a worker's options against an in-process server.
#include <string>

#include "common/config.h"
#include "tests/server/cluster.h"
#include "worker/trainer.h"

namespace gradpress::testing {

// Rank `rank` of c.cluster.workers, talking to `cluster`; run_dir "" writes no files;
// max_steps 0 trains all epochs.
inline worker::TrainerOptions TrainerOptionsFor(const Config& c, int rank, const Cluster& cluster,
                                                const std::string& run_dir = "",
                                                int64_t max_steps = 0) {
  worker::TrainerOptions o;
  o.config = c;
  o.rank = rank;
  o.workers = c.cluster.workers;
  o.server = "127.0.0.1:" + std::to_string(cluster.port);
  o.run_dir = run_dir;
  o.max_steps = max_steps;
  return o;
}

}  // namespace gradpress::testing
