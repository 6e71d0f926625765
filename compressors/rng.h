#pragma once
// Small, fast, seedable RNG for stochastic rounding and sampling (xorshift64*, seeded
// through splitmix64). Deterministic across platforms for a given seed.
//
//   Rng rng(Seed(config_seed, key, step));  float u = rng.Uniform();  // [0, 1)
//
// Thread-safety: a value; one per thread.
#include <cstdint>
#include <string>
#include <string_view>

#include "common/byte_io.h"

namespace gradpress::compressors {

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Mixes a base seed with a key name and a step (FNV-1a over the key): the shared seed of
// randomk, identical on every worker and on the server.
inline uint64_t Seed(uint64_t base, std::string_view key, int64_t step) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (char c : key) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001B3ull;
  return SplitMix64(SplitMix64(base ^ h) ^ static_cast<uint64_t>(step));
}

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { Reseed(seed); }
  void Reseed(uint64_t seed) {
    state_ = SplitMix64(seed);
    if (state_ == 0) state_ = 0x9E3779B97F4A7C15ull;
  }
  uint64_t Next() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    return state_ * 0x2545F4914F6CDD1Dull;
  }
  // The raw state, for checkpoints: set_state(state()) continues the same stream.
  uint64_t state() const { return state_; }
  void set_state(uint64_t s) { state_ = s != 0 ? s : 0x9E3779B97F4A7C15ull; }
  // Uniform float in [0, 1) with 24 random bits.
  float Uniform() { return static_cast<float>(Next() >> 40) * 0x1.0p-24f; }
  // Two uniforms from one draw.
  void Uniform2(float* a, float* b) {
    const uint64_t r = Next();
    *a = static_cast<float>(r >> 40) * 0x1.0p-24f;
    *b = static_cast<float>((r >> 8) & 0xFFFFFF) * 0x1.0p-24f;
  }
  // Uniform integer in [0, bound), bound > 0 (Lemire's multiply-shift; bias < bound / 2^64).
  uint64_t Below(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<__uint128_t>(Next()) * bound) >> 64);
  }

 private:
  uint64_t state_;
};

// Checkpoint helpers for codecs whose only carried state is one Rng (qsgd, terngrad, topk,
// dgc): 8 bytes, little endian.
inline void SaveRngState(const Rng& rng, std::string* out) {
  ByteWriter(out).Put<uint64_t>(rng.state());
}
inline void LoadRngState(std::string_view in, const char* codec, Rng* rng) {
  ByteReader r(in, codec);
  rng->set_state(r.Get<uint64_t>("rng state"));
  r.ExpectEnd();
}

}  // namespace gradpress::compressors
