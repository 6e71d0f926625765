// Host tests of terngrad's device logic (quantizer_stochastic_logic.h) with its xorshift64*
// stream: loops over TernMaxKernel's and TernEncodeKernel's warps and lanes
// (quantizer_terngrad.cu), each warp jumping together and each lane through its lane table as
// the kernel does, must write the CPU codec's payload for the same seed byte for byte, leave
// the Rng where the CPU codec leaves it, and decode as the CPU codec does.
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <string>
#include <vector>

#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/quantizer_stochastic_logic.h"
#include "compressors/cuda/rng_logic.h"
#include "compressors/terngrad.h"
#include "tests/compressors/cuda/quantizer_test_util.h"

namespace gradpress::compressors::cuda {
namespace {

using testing::CpuEncode;
using testing::FirstBitDifference;
using testing::MakeCpu;
using testing::Mix;
using testing::Record;
using testing::SavedRngState;
using testing::Values;

const std::vector<int64_t> kSizes = {0, 1, 7, 8, 9, 513, 100003};
constexpr int64_t kWarpElements = 32 * kTernChunk;

const uint64_t* LaneTable() {
  static const std::vector<uint64_t> t = [] {
    std::vector<uint64_t> v(kLaneTable64Size);
    BuildLaneTable64(HostJumpTable64(), kTernChunk, v.data());
    return v;
  }();
  return t.data();
}

// TernMaxKernel: per lane, flush the running max at each bucket boundary; a warp inside one
// bucket reduces its lanes first.
std::vector<uint32_t> TernMaxTwin(const std::vector<float>& v, int64_t bucket) {
  const auto n = static_cast<int64_t>(v.size());
  std::vector<uint32_t> maxima((n + bucket - 1) / bucket, 0);
  for (int64_t warp_first = 0; warp_first < n; warp_first += kWarpElements) {
    const int64_t warp_last = std::min(warp_first + kWarpElements, n) - 1;
    const bool one_bucket = warp_first / bucket == warp_last / bucket;
    uint32_t top = 0;
    for (int lane = 0; lane < 32; ++lane) {
      const int64_t start = warp_first + int64_t{lane} * kTernChunk;
      int64_t k = start / bucket, boundary = (k + 1) * bucket;
      float m = 0.f;
      for (int64_t i = start; i < std::min(start + kTernChunk, n); ++i) {
        if (i == boundary) {
          maxima[k] = std::max(maxima[k], FloatBits(m));
          ++k;
          boundary += bucket;
          m = 0.f;
        }
        m = MaxAbs(m, v[i]);
      }
      if (one_bucket) {
        top = std::max(top, FloatBits(m));
      } else if (start < n) {
        maxima[k] = std::max(maxima[k], FloatBits(m));
      }
    }
    if (one_bucket) maxima[warp_first / bucket] = std::max(maxima[warp_first / bucket], top);
  }
  return maxima;
}

// TernEncodeKernel, warp by warp and lane by lane; advances *rng as the device codec does.
std::string TernTwin(const std::vector<float>& v, int64_t bucket, Rng* rng, int* err) {
  const auto n = static_cast<int64_t>(v.size());
  const int64_t nb = (n + bucket - 1) / bucket;
  const std::vector<uint32_t> maxima = TernMaxTwin(v, bucket);
  std::string out(4 + 4 * nb + (2 * n + 7) / 8, '\xCD');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  StoreU32(p, static_cast<uint32_t>(bucket));
  uint8_t* scales = p + 4;
  uint8_t* stream = scales + 4 * nb;
  for (int64_t warp_first = 0; warp_first < n; warp_first += kWarpElements) {
    uint64_t state = rng->state();
    int power = 0;
    for (uint64_t steps = warp_first; steps != 0; steps >>= 1, ++power) {
      if (steps & 1) {
        uint64_t share = 0;  // the XOR of the 32 lanes' shares
        for (int lane = 0; lane < 32; ++lane)
          share ^= JumpShare64(HostJumpTable64() + power * 64, state, lane);
        state = share;
      }
    }
    for (int lane = 0; lane < 32; ++lane) {
      uint64_t x = ApplyLaneColumns64(LaneTable(), lane, state);
      const int64_t start = warp_first + int64_t{lane} * kTernChunk;
      int64_t k = start / bucket, boundary = (k + 1) * bucket;
      float m = start < n ? BitsFloat(maxima[k]) : 0.f;
      float inv = TernInverse(m);
      uint32_t byte = 0;
      for (int64_t i = start; i < std::min(start + kTernChunk, n); ++i) {
        if (i == boundary) {
          ++k;
          boundary += bucket;
          m = BitsFloat(maxima[k]);
          inv = TernInverse(m);
        }
        if (i == boundary - bucket) {
          StoreF32(scales + 4 * k, m);
          if (!FiniteF(m)) Record(err, kNonFiniteInput);
        }
        x = Xorshift64Step(x);
        byte |= TernSymbol(UniformOf(Xorshift64Out(x)), v[i], inv) << (2 * (i & 3));
        if ((i & 3) == 3 || i == n - 1) {
          stream[i >> 2] = static_cast<uint8_t>(byte);
          byte = 0;
        }
      }
    }
  }
  rng->set_state(Advance64(HostJumpTable64(), rng->state(), static_cast<uint64_t>(n)));
  return out;
}

// TernDecodeKernel.
std::vector<float> TernDecodeTwin(const std::string& payload, int64_t n, int* err) {
  const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
  const uint32_t bucket = LoadU32(p);
  const int64_t nb = (n + bucket - 1) / bucket;
  const uint8_t* scales = p + 4;
  const uint8_t* stream = scales + 4 * nb;
  if (n > 0 && !PaddingClear(stream[(2 * n + 7) / 8 - 1], 2 * n)) Record(err, kPaddingBits);
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t k = static_cast<uint32_t>(i) / bucket;
    const float s = LoadF32(scales + 4 * static_cast<uint64_t>(k));
    if (!(FiniteF(s) && s >= 0.f)) Record(err, kBadScale);
    const uint32_t t = (stream[i >> 2] >> (2 * (i & 3))) & 3u;
    if (t == 3) Record(err, kBadSymbol);
    out[i] = TernValue(t, s);
  }
  return out;
}

TEST_CASE("terngrad: the chunk-per-lane loops write terngrad.cc's payload", "[cuda][logic]") {
  for (int64_t configured : {0, 1, 7, 64, 100, 3000, 100003}) {
    const uint64_t seed = 3 + configured;
    auto cpu = MakeCpu<TernGradCompressor>("terngrad bucket_size=" + std::to_string(configured) +
                                           " seed=" + std::to_string(seed));
    Rng rng(seed);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9}, int64_t{513},
                      int64_t{2048}, int64_t{2049}, int64_t{100003}}) {
      const std::vector<float> v = Values(n, n + configured, Mix{true, true, true});
      const int64_t bucket = std::max<int64_t>(1, configured ? configured : n);
      int err = 0;
      const std::string twin = TernTwin(v, bucket, &rng, &err);
      CHECK(err == 0);
      REQUIRE(twin == CpuEncode(cpu.get(), v));
      std::string saved;
      cpu->SaveState(&saved);
      REQUIRE(SavedRngState(saved) == rng.state());
      std::vector<float> want(n);
      cpu->DecodeTo(twin, n, want.data());
      REQUIRE(FirstBitDifference(TernDecodeTwin(twin, n, &err), want) == -1);
      CHECK(err == 0);
    }
  }
}

TEST_CASE("terngrad: a NaN encodes as 0 and an Inf is flagged, as in terngrad.cc",
          "[cuda][logic]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = Values(5000, 6);
  v[10] = nan;
  v[4000] = -nan;
  auto cpu = MakeCpu<TernGradCompressor>("terngrad bucket_size=1000 seed=9");
  Rng rng(9);
  int err = 0;
  CHECK(TernTwin(v, 1000, &rng, &err) == CpuEncode(cpu.get(), v));
  CHECK(err == 0);
  v[2500] = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(CpuEncode(cpu.get(), v), InvalidArgument);
  TernTwin(v, 1000, &rng, &err);
  CHECK(err == kNonFiniteInput);
}

TEST_CASE("terngrad: bad payloads are flagged where terngrad.cc throws", "[cuda][logic]") {
  const int64_t n = 11;  // 22 bits: 2 bits of padding
  Rng rng(2);
  int err = 0;
  const std::string good = TernTwin(Values(n, 4), 4, &rng, &err);
  auto cpu = MakeCpu<TernGradCompressor>("terngrad");
  std::vector<float> out(n);
  auto expect_flag = [&](const std::string& payload, int code) {
    CHECK_THROWS_AS(cpu->DecodeTo(payload, n, out.data()), InvalidArgument);
    int flag = 0;
    TernDecodeTwin(payload, n, &flag);
    CHECK(flag == code);
  };
  std::string padded = good;
  padded.back() = static_cast<char>(padded.back() | 0x40);
  expect_flag(padded, kPaddingBits);
  std::string three = good;
  three[4 + 4 * 3 + 1] = static_cast<char>(three[4 + 4 * 3 + 1] | 0x0C);  // element 5
  expect_flag(three, kBadSymbol);
  std::string negative = good;
  StoreF32(reinterpret_cast<uint8_t*>(negative.data()) + 4 + 4 * 2, -0.5f);
  expect_flag(negative, kBadScale);
}

TEST_CASE("terngrad: the warp jump and the lane table are Advance64", "[cuda][logic]") {
  std::vector<uint64_t> cols(kLaneTable64Size);
  BuildLaneTable64(HostJumpTable64(), kTernChunk, cols.data());
  Rng rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    const uint64_t state = rng.Next();
    const int power = trial % kJumpBits;
    uint64_t warp = 0;
    for (int lane = 0; lane < 32; ++lane)
      warp ^= JumpShare64(HostJumpTable64() + power * 64, state, lane);
    REQUIRE(warp == ApplyColumns64(HostJumpTable64() + power * 64, state));
    for (int lane = 0; lane < 32; ++lane)
      REQUIRE(ApplyLaneColumns64(cols.data(), lane, state) ==
              Advance64(HostJumpTable64(), state, static_cast<uint64_t>(lane) * kTernChunk));
  }
  // The staging puts each element where its reader looks, once.
  for (int p = 0; p < kTernChunk / kTernPiece; ++p) {
    std::vector<int> seen(32 * kTernTileStride, 0);
    for (int q = 0; q < kTernPiece; ++q) {
      for (int lane = 0; lane < 32; ++lane) {
        const StageSlot s = TernStageSlot(p, q, lane);
        const int t = s.slot / kTernTileStride, m = s.slot % kTernTileStride;
        REQUIRE(m < kTernPiece);
        REQUIRE(s.offset == int64_t{t} * kTernChunk + p * kTernPiece + m);
        ++seen.at(s.slot);
      }
    }
    CHECK(std::count(seen.begin(), seen.end(), 1) == 32 * kTernPiece);
  }
}

}  // namespace
}  // namespace gradpress::compressors::cuda
