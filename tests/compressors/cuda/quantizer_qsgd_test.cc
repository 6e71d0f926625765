// Host tests of qsgd's device logic (quantizer_stochastic_logic.h) with its eight xorshift32
// lanes: loops over QsgdEncodeKernel's blocks, groups and lanes (quantizer_qsgd.cu), each lane
// jumping to its first draw as the kernel's thread does, must write the CPU codec's
// fixed-width payload for the same seed byte for byte, leave the Rng where the CPU codec
// leaves it, and decode as the CPU codec does.
#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <string>
#include <vector>

#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/quantizer_stochastic_logic.h"
#include "compressors/cuda/rng_logic.h"
#include "compressors/qsgd.h"
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

// QsgdEncodeKernel, block by block and group by group. `skew` shifts every lane's jump (a
// wrong lane mapping), which the tests use to show that they can fail.
std::string QsgdTwin(const std::vector<float>& v, uint32_t s, uint32_t bucket, bool max_norm,
                     Rng* rng, int* err, uint64_t skew = 0) {
  const auto n = static_cast<int64_t>(v.size());
  uint32_t lanes[8];
  for (auto& x : lanes) x = static_cast<uint32_t>(rng->Next() >> 32) | 1u;
  const int b = QsgdLevelBits(s), width = b + 1, per_group = QsgdPerGroup(bucket);
  const int64_t nb = (n + bucket - 1) / bucket;
  std::string out(7 + 4 * nb + (n * width + 7) / 8, '\xCD');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  p[0] = max_norm ? 2 : 0;
  p[1] = static_cast<uint8_t>(s);
  p[2] = static_cast<uint8_t>(s >> 8);
  StoreU32(p + 3, bucket);
  uint8_t* norms = p + 7;
  uint8_t* stream = norms + 4 * nb;
  const int64_t per_block = int64_t{kQsgdGroups} * per_group;
  const int64_t blocks = std::max<int64_t>(1, (nb + per_block - 1) / per_block);
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t block_bucket = blk * per_block, block_first = block_bucket * bucket;
    const int64_t block_elems = block_first < n ? std::min(per_block * bucket, n - block_first) : 0;
    const int64_t block_bytes = (block_elems * width + 7) / 8;
    std::vector<uint32_t> words((block_bytes + 3) / 4, 0);
    for (int group = 0; group < kQsgdGroups; ++group) {
      const int64_t first_bucket = block_bucket + group * per_group;
      uint32_t x[8];
      for (int j = 0; j < 8; ++j) {
        x[j] = lanes[j];
        if (first_bucket < nb)
          x[j] = Advance32(HostJumpTable32(), x[j], first_bucket * QsgdLaneDraws(bucket, j) + skew);
      }
      for (int r = 0; r < per_group; ++r) {
        const int64_t kb = first_bucket + r, first = kb * bucket;
        const int64_t len = kb < nb ? std::min<int64_t>(bucket, n - first) : 0;
        if (len == 0) continue;
        const float* in = v.data() + first;
        double norm;
        if (max_norm) {
          float m = 0.f;
          int bad = 0;
          for (int j = 0; j < 8; ++j) {
            float mj = 0.f;
            for (int64_t i = j; i < len; i += 8) {
              mj = MaxAbs(mj, in[i]);
              bad |= !FiniteF(in[i]);
            }
            m = m < mj ? mj : m;
          }
          norm = bad ? std::numeric_limits<double>::quiet_NaN() : m;
        } else {
          float acc[8] = {};
          const int64_t full = len - len % 8;
          for (int j = 0; j < 8; ++j)
            for (int64_t i = j; i < full; i += 8) acc[j] = QsgdSquareAdd(acc[j], in[i]);
          for (int64_t i = full; i < len; ++i) acc[0] = QsgdSquareAdd(acc[0], in[i]);
          norm = QsgdL2Norm(acc);
        }
        const bool finite = FiniteD(norm);
        if (!finite) Record(err, kNonFiniteInput);
        const float norm_f = finite ? static_cast<float>(norm) : 0.f;
        StoreF32(norms + 4 * kb, norm_f);
        const float scale = QsgdScale(norm_f, s);
        for (int j = 0; j < 8; ++j) {
          for (int64_t i = j; i < len; i += 8) {
            x[j] = Xorshift32Step(x[j]);
            const uint32_t sym = QsgdSymbol(in[i], scale, s, b, x[j]);
            const WordShares sh = ShareField(sym, (first - block_first + i) * width, width);
            words[sh.word] |= sh.lo;
            if (sh.hi) words.at(sh.word + 1) |= sh.hi;
          }
        }
      }
    }
    uint8_t* dst = stream + block_first * width / 8;
    for (int64_t k = 0; k < block_bytes; ++k) dst[k] = WordByte(words.data(), k);
  }
  return out;
}

// QsgdDecodeKernel (fixed width).
std::vector<float> QsgdDecodeTwin(const std::string& payload, int64_t n, int* err) {
  const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
  const uint32_t s = p[1] | p[2] << 8, bucket = LoadU32(p + 3);
  const int b = QsgdLevelBits(s), width = b + 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  const uint8_t* norms = p + 7;
  const uint8_t* stream = norms + 4 * nb;
  if (n > 0) {
    const uint64_t bits = static_cast<uint64_t>(n) * width;
    if (!PaddingClear(stream[(bits + 7) / 8 - 1], bits)) Record(err, kPaddingBits);
  }
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint32_t k = static_cast<uint32_t>(i) / bucket;
    const float norm = LoadF32(norms + 4 * static_cast<uint64_t>(k));
    if (!(FiniteF(norm) && norm >= 0.f)) Record(err, kBadScale);
    const uint32_t sym = LoadBits(stream, static_cast<uint64_t>(i) * width, width);
    if ((sym & ((1u << b) - 1)) > s) Record(err, kLevelAboveS);
    out[i] = QsgdValue(sym, b, norm / static_cast<float>(s));
  }
  return out;
}

std::string QsgdSpec(uint32_t s, uint32_t bucket, bool max_norm, uint64_t seed) {
  return "qsgd elias=false levels=" + std::to_string(s) + " bucket_size=" + std::to_string(bucket) +
         " norm=" + (max_norm ? "max" : "l2") + " seed=" + std::to_string(seed);
}

TEST_CASE("qsgd: the lane-per-thread loops write qsgd.cc's fixed-width payload", "[cuda][logic]") {
  for (bool max_norm : {false, true}) {
    for (uint32_t s : {1u, 16u, 255u, 65535u}) {
      for (uint32_t bucket : {1u, 7u, 8u, 9u, 512u, 1000u, kQsgdMaxEncodeBucket}) {
        const uint64_t seed = 1 + s + bucket;
        auto cpu = MakeCpu<QsgdCompressor>(QsgdSpec(s, bucket, max_norm, seed));
        Rng rng(seed);
        for (int64_t n : kSizes) {
          // A max norm below s / FLT_MAX makes qsgd.cc's scale Inf (its levels undefined):
          // no tiny values there.
          const std::vector<float> v = Values(n, n + s, Mix{true, true, !max_norm});
          int err = 0;
          const std::string twin = QsgdTwin(v, s, bucket, max_norm, &rng, &err);
          CHECK(err == 0);
          REQUIRE(twin == CpuEncode(cpu.get(), v));
          std::string saved;
          cpu->SaveState(&saved);
          REQUIRE(SavedRngState(saved) == rng.state());
          std::vector<float> want(n);
          cpu->DecodeTo(twin, n, want.data());
          REQUIRE(FirstBitDifference(QsgdDecodeTwin(twin, n, &err), want) == -1);
          CHECK(err == 0);
        }
      }
    }
  }
}

TEST_CASE("qsgd: a wrong lane mapping breaks the byte identity", "[cuda][logic]") {
  const std::vector<float> v = Values(4099, 3);
  for (uint64_t skew : {1, 8, 64}) {
    auto cpu = MakeCpu<QsgdCompressor>(QsgdSpec(16, 512, false, 5));
    Rng rng(5);
    int err = 0;
    CHECK(QsgdTwin(v, 16, 512, false, &rng, &err, skew) != CpuEncode(cpu.get(), v));
  }
}

TEST_CASE("qsgd: bad input and bad payloads are flagged where qsgd.cc throws", "[cuda][logic]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (bool max_norm : {false, true}) {
    for (float bad : {nan, inf, -inf, 2e19f}) {  // 2e19 squared overflows (l2 only)
      std::vector<float> v = Values(40, 8);
      v[17] = bad;
      auto cpu = MakeCpu<QsgdCompressor>(QsgdSpec(16, 8, max_norm, 1));
      Rng rng(1);
      int err = 0;
      QsgdTwin(v, 16, 8, max_norm, &rng, &err);
      if (max_norm && bad == 2e19f) {
        CHECK(err == 0);
        continue;
      }
      CHECK_THROWS_AS(CpuEncode(cpu.get(), v), InvalidArgument);
      CHECK(err == kNonFiniteInput);
    }
  }
  const int64_t n = 21;  // 21 * 6 bits: 6 bits of padding
  Rng rng(2);
  int err = 0;
  const std::string good = QsgdTwin(Values(n, 4), 16, 8, false, &rng, &err);
  auto cpu = MakeCpu<QsgdCompressor>(QsgdSpec(16, 8, false, 1));
  std::vector<float> out(n);
  auto expect_flag = [&](const std::string& payload, int code) {
    CHECK_THROWS_AS(cpu->DecodeTo(payload, n, out.data()), InvalidArgument);
    int flag = 0;
    QsgdDecodeTwin(payload, n, &flag);
    CHECK(flag == code);
  };
  std::string padded = good;
  padded.back() = static_cast<char>(padded.back() | 0x40);
  expect_flag(padded, kPaddingBits);
  std::string above = good;  // element 0: level 31 > 16
  above[7 + 4 * 3] = static_cast<char>(above[7 + 4 * 3] | 0x1F);
  expect_flag(above, kLevelAboveS);
  std::string nan_norm = good;
  StoreF32(reinterpret_cast<uint8_t*>(nan_norm.data()) + 7 + 4, nan);
  expect_flag(nan_norm, kBadScale);
}

TEST_CASE("qsgd: a max norm below s / FLT_MAX still gives levels in [0, s]", "[cuda][logic]") {
  // qsgd.cc's levels are undefined here (scale = Inf); the device clamps to s (or 0 for 0).
  const std::vector<float> v = {1e-40f, -1e-40f, 0.f, 5e-41f, -0.f, 1e-45f, 0.f, 1e-40f, 2e-40f};
  Rng rng(1);
  int err = 0;
  const std::string twin = QsgdTwin(v, 16, 16, true, &rng, &err);
  CHECK(err == 0);
  std::vector<float> decoded = QsgdDecodeTwin(twin, 9, &err);
  CHECK(err == 0);
  const float unit = 2e-40f / 16.f;  // the max norm over s
  for (size_t i = 0; i < v.size(); ++i)
    CHECK(decoded[i] == (v[i] == 0.f ? 0.f : v[i] < 0.f ? -16.f * unit : 16.f * unit));
}

}  // namespace
}  // namespace gradpress::compressors::cuda
