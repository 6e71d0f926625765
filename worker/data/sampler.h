#pragma once
// Which examples a rank trains on in an epoch: one permutation of [0, n) per (seed, epoch),
// the same on every rank, cut into `world` disjoint shards of equal size.
//
//   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
//     std::vector<int64_t> mine = EpochIndices(train.size(), rank, world, epoch, seed);
//     for (size_t b = 0; b < mine.size(); b += batch) ... GatherBatch(train, mine, b, b + batch)
//   }
//
// Rank r takes the strided slice perm[r], perm[r + world], perm[r + 2 world], ... of the first
// world x ShardSize(n, world) entries of the epoch's permutation. The remainder (the last
// n % world entries of the permutation) is dropped, never padded: no example appears twice in
// an epoch, every rank gets exactly ShardSize(n, world) indices (so all ranks run the same
// number of steps), and the dropped examples differ from epoch to epoch. With n % world == 0
// the shards cover [0, n) exactly.
// The permutation is Fisher-Yates over a std::mt19937_64 seeded with MixSeed(seed, epoch),
// with unbiased bounded draws (worker/data/random.h): identical across platforms and builds.
//
// Errors: InvalidArgument for world < 1, rank outside [0, world), n < world, or epoch < 0.
// Thread-safety: pure functions. Cost: O(n) time and memory per call.
#include <cstdint>
#include <vector>

namespace gradpress::worker::data {

// Examples per rank per epoch: n / world.
int64_t ShardSize(int64_t n, int world);

// The full permutation of [0, n) for (seed, epoch), shared by all ranks.
std::vector<int64_t> EpochPermutation(int64_t n, int64_t epoch, uint64_t seed);

// This rank's ShardSize(n, world) indices for the epoch, in training order.
std::vector<int64_t> EpochIndices(int64_t n, int rank, int world, int64_t epoch, uint64_t seed);

}  // namespace gradpress::worker::data
