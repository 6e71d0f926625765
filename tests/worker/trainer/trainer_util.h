#pragma once
// Helpers shared by the trainer tests: a worker's options against an in-process server.
#include <algorithm>
#include <string>
#include <vector>

#include "common/config.h"
#include "tests/catch_torch.h"
#include "tests/server/cluster.h"
#include "worker/loop/trainer.h"

namespace gradpress::testing {

// Rank `rank` of c.cluster.workers, talking to `server` ("" : c.cluster.servers, the shards);
// run_dir "" writes no files; max_steps 0 trains all epochs.
inline worker::TrainerOptions TrainerOptionsFor(const Config& c, int rank,
                                                const std::string& server,
                                                const std::string& run_dir = "",
                                                int64_t max_steps = 0) {
  worker::TrainerOptions o;
  o.config = c;
  o.rank = rank;
  o.workers = c.cluster.workers;
  o.server = server;
  o.run_dir = run_dir;
  o.max_steps = max_steps;
  return o;
}

// The same, talking to an in-process `cluster`.
inline worker::TrainerOptions TrainerOptionsFor(const Config& c, int rank, const Cluster& cluster,
                                                const std::string& run_dir = "",
                                                int64_t max_steps = 0) {
  return TrainerOptionsFor(c, rank, "127.0.0.1:" + std::to_string(cluster.port), run_dir,
                           max_steps);
}

// Largest |a[i] - b[i]| over two models' tensors (same count, same shapes).
inline double MaxDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  REQUIRE(a.size() == b.size());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

}  // namespace gradpress::testing
