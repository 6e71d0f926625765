#pragma once
// Small, portable random helpers for data order and augmentation. Unlike std::shuffle and
// std::uniform_int_distribution, whose algorithms differ between standard libraries, these
// give the same numbers everywhere, so every rank computes the same permutation.
//
//   std::mt19937_64 rng(MixSeed(seed, epoch));
//   uint64_t dx = UniformBelow(&rng, 9);             // 0..8, unbiased
//
// Thread-safety: pure functions; an engine belongs to one thread.
#include <cstdint>
#include <random>

#include "compressors/rng.h"

namespace gradpress::worker::data {

using compressors::SplitMix64;  // the bijective 64-bit mixer of compressors/rng.h

// A stream seed for (seed, stream): distinct streams give unrelated engines.
inline uint64_t MixSeed(uint64_t seed, uint64_t stream) {
  return SplitMix64(seed ^ SplitMix64(stream));
}

// Uniform integer in [0, bound), bound >= 1, by rejection (no modulo bias).
inline uint64_t UniformBelow(std::mt19937_64* rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
  for (;;) {
    const uint64_t x = (*rng)();
    if (x >= threshold) return x % bound;
  }
}

}  // namespace gradpress::worker::data
