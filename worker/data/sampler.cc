#include "worker/data/sampler.h"

#include <numeric>
#include <random>
#include <utility>

#include "common/error.h"
#include "worker/data/random.h"

namespace gradpress::worker::data {

int64_t ShardSize(int64_t n, int world) {
  GP_ENFORCE(world >= 1, "world size ", world, " must be at least 1");
  GP_ENFORCE(n >= world, "cannot shard ", n, " examples across ", world,
             " ranks: every rank needs at least one");
  return n / world;
}

std::vector<int64_t> EpochPermutation(int64_t n, int64_t epoch, uint64_t seed) {
  GP_ENFORCE(n >= 0, "example count ", n, " must not be negative");
  GP_ENFORCE(epoch >= 0, "epoch ", epoch, " must not be negative");
  std::vector<int64_t> perm(static_cast<size_t>(n));
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::mt19937_64 rng(MixSeed(seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = n - 1; i > 0; --i) {
    const int64_t j = static_cast<int64_t>(UniformBelow(&rng, static_cast<uint64_t>(i) + 1));
    std::swap(perm[i], perm[j]);
  }
  return perm;
}

std::vector<int64_t> EpochIndices(int64_t n, int rank, int world, int64_t epoch, uint64_t seed) {
  const int64_t per_rank = ShardSize(n, world);
  GP_ENFORCE(rank >= 0 && rank < world, "rank ", rank, " is outside [0, ", world, ")");
  const std::vector<int64_t> perm = EpochPermutation(n, epoch, seed);
  std::vector<int64_t> mine(static_cast<size_t>(per_rank));
  for (int64_t k = 0; k < per_rank; ++k) mine[k] = perm[rank + k * world];
  return mine;
}

}  // namespace gradpress::worker::data
