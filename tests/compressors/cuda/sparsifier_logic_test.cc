// Host twins of the device sparsifiers' selection and encoding (compressors/cuda/sparse_*.cu):
// loops over the same GP_HD functions (sparsifier_logic.h, sparsifier_index_logic.h) in the
// kernels' arrangement (per-thread chunks that jump ahead, radix selects, scans, writes in any
// order), whose payloads and Rng states must equal the CPU codecs' byte for byte.
#include "compressors/cuda/sparsifier_logic.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "common/byte_io.h"
#include "compressors/cuda/rng_logic.h"
#include "compressors/cuda/sparsifier_index_logic.h"
#include "compressors/randomk.h"
#include "compressors/selection.h"
#include "tests/compressors/cuda/sparsifier_test_util.h"

namespace gradpress::compressors::cuda {
namespace {

using sparse_testing::Data;
using sparse_testing::Make;

constexpr int64_t kSampleChunk = 64;   // sparse_select.cu
constexpr int64_t kStratumChunk = 32;  // sparse_coding.cu

struct Sel {
  std::vector<int32_t> idx;
  std::vector<float> val;
};

// RadixSelect: per pass, a histogram of the digits of the keys matching the prefix, its bins
// scanned from the top for the one holding the rank. Returns the key; *greater = keys above.
uint32_t TwinRadixSelect(const std::vector<uint32_t>& keys, int64_t rank, int64_t* greater) {
  uint32_t prefix = 0;
  *greater = 0;
  for (int pass = 0; pass < kRadixPasses; ++pass) {
    std::vector<int64_t> hist(RadixBins(pass), 0);
    for (uint32_t key : keys) {
      const int d = RadixDigit(key, pass, prefix);
      if (d >= 0) ++hist[d];
    }
    const int64_t remaining = rank - *greater;
    int64_t above = 0, found = 0;
    for (int b = RadixBins(pass) - 1; b >= 0; --b) {
      if (RadixBinHolds(above, hist[b], remaining)) {
        prefix |= static_cast<uint32_t>(b) << RadixShift(pass);
        *greater += above;
        ++found;
      }
      above += hist[b];
    }
    REQUIRE(found == 1);  // exactly one thread of the last block picks a bin
  }
  return prefix;
}

// SampleBounds: keys as SampleKeysKernel (chunks taken in reverse: any order), selected.
float TwinThreshold(const std::vector<float>& in, double ratio, int64_t m, uint64_t* state) {
  const auto n = static_cast<int64_t>(in.size());
  const bool all = m >= n;
  const int64_t size = all ? n : std::max<int64_t>(m, 1);
  std::vector<uint32_t> keys(size);
  if (all) {
    for (int64_t i = 0; i < n; ++i) keys[i] = MagnitudeBits(in[i]);
  } else {
    const double stride = static_cast<double>(n) / static_cast<double>(size);
    for (int64_t first = (size - 1) / kSampleChunk * kSampleChunk; first >= 0;
         first -= kSampleChunk) {
      uint64_t st = Advance64(HostJumpTable64(), *state, first);
      for (int64_t s = first; s < std::min(size, first + kSampleChunk); ++s) {
        st = Xorshift64Step(st);
        keys[s] = MagnitudeBits(in[SamplePosition(s, n, stride, Xorshift64Out(st))]);
      }
    }
    *state = Advance64(HostJumpTable64(), *state, size);
  }
  const int64_t above = std::clamp<int64_t>(
      static_cast<int64_t>(std::ceil(ratio * static_cast<double>(size))), 1, size);
  int64_t greater = 0;
  return NextTowardZero(TwinRadixSelect(keys, above - 1, &greater));
}

Sel TwinFilter(const std::vector<float>& in, float lo, float hi) {
  Sel s;
  for (size_t i = 0; i < in.size(); ++i) {
    if (OutsideBounds(in[i], lo, hi)) {
      s.idx.push_back(static_cast<int32_t>(i));
      s.val.push_back(in[i]);
    }
  }
  return s;
}

// KeepLargest: the k-th largest magnitude bits by RadixSelect, then the scan of KeepFlags
// whose output writes each kept survivor to its KeepSlot (in reverse: any order).
Sel TwinKeepLargest(const Sel& s, int64_t k) {
  const auto c = static_cast<int64_t>(s.idx.size());
  if (c <= k) return s;
  std::vector<uint32_t> keys(c);
  for (int64_t i = 0; i < c; ++i) keys[i] = MagnitudeBits(s.val[i]);
  int64_t greater = 0;
  const uint32_t kth = TwinRadixSelect(keys, k - 1, &greater);
  std::vector<uint64_t> before(c, 0);
  for (int64_t i = 1; i < c; ++i) before[i] = before[i - 1] + KeepFlags(keys[i - 1], kth);
  Sel out{std::vector<int32_t>(k, -1), std::vector<float>(k)};
  for (int64_t i = c - 1; i >= 0; --i) {
    const int64_t slot = KeepSlot(keys[i], kth, before[i], k - greater);
    if (slot < 0) continue;
    REQUIRE(slot < k);
    REQUIRE(out.idx[slot] == -1);  // each slot written once
    out.idx[slot] = s.idx[i];
    out.val[slot] = s.val[i];
  }
  for (int32_t i : out.idx) REQUIRE(i >= 0);  // and every slot written
  return out;
}

// The payload as DeviceSparsifier::Encode assembles it; delta varints as DeltaEncoder writes
// them (lengths, exclusive scan over k + 1, writes in reverse order).
std::string TwinPayload(const Sel& s, uint8_t coding) {
  const auto k = static_cast<int64_t>(s.idx.size());
  std::string out;
  ByteWriter w(&out);
  w.Put<uint8_t>(coding);
  w.PutVarint(k);
  if (coding == 0) {
    w.PutBytes(s.idx.data(), 4 * k);
  } else {
    std::vector<int64_t> lens(k + 1, 0), offsets(k + 1);
    for (int64_t j = 0; j < k; ++j)
      lens[j] = VarintLength(DeltaGap(s.idx[j], j > 0 ? s.idx[j - 1] : -1));
    std::exclusive_scan(lens.begin(), lens.end(), offsets.begin(), int64_t{0});
    std::vector<uint8_t> bytes(offsets[k]);
    for (int64_t j = k - 1; j >= 0; --j)
      WriteVarint(DeltaGap(s.idx[j], j > 0 ? s.idx[j - 1] : -1), bytes.data() + offsets[j]);
    w.PutBytes(bytes.data(), bytes.size());
  }
  std::vector<uint8_t> vals(4 * k);
  for (int64_t j = 0; j < k; ++j) StoreF32(vals.data() + 4 * j, s.val[j]);
  w.PutBytes(vals.data(), vals.size());
  return out;
}

// DeviceTopK::Select and DeviceDgc::Select over the twins.
Sel TwinTopK(const std::vector<float>& in, int64_t k, uint64_t* state) {
  const auto n = static_cast<int64_t>(in.size());
  if (k <= 0 || n <= 0) return {};
  const int64_t sample = std::max<int64_t>(8192, n / 200);
  const double ratio = static_cast<double>(k) / static_cast<double>(n);
  double aim = std::min(1.0, ratio * 1.3 + 64.0 / static_cast<double>(std::min(n, sample)));
  Sel s;
  for (int attempt = 0;; ++attempt) {
    const float t = attempt < 3 ? TwinThreshold(in, aim, sample, state) : 0.f;
    s = TwinFilter(in, -t, t);
    if (static_cast<int64_t>(s.idx.size()) >= k || t == 0.f) break;
    aim = std::min(1.0, aim * 4.0);
  }
  return TwinKeepLargest(s, k);
}

Sel TwinDgc(const std::vector<float>& in, double ratio, double sample_ratio, uint64_t* state) {
  const auto n = static_cast<int64_t>(in.size());
  const int64_t k = KFromRatio(ratio, n);
  if (k == 0) return {};
  const auto sample = std::max<int64_t>(std::min<int64_t>(n, 1024),
                                        std::llround(sample_ratio * static_cast<double>(n)));
  float t = TwinThreshold(in, ratio, sample, state);
  Sel s;
  for (int round = 0;; ++round) {
    s = TwinFilter(in, -t, t);
    const auto count = static_cast<int64_t>(s.idx.size());
    if (count >= (k * 4) / 5 || round == 3 || t == 0.f) break;
    t *= 0.75f;
  }
  return TwinKeepLargest(s, k);
}

std::string StateOf(uint64_t state) {
  Rng rng;
  rng.set_state(state);
  std::string out;
  SaveRngState(rng, &out);
  return out;
}

TEST_CASE("stratified indices: one jump per chunk equals StratifiedIndices") {
  for (uint64_t seed : {0ull, 1ull, 42ull, 0xDEADBEEFull}) {
    for (auto [k, n] : {std::pair<int64_t, int64_t>{1, 1},
                        {7, 10},
                        {100, 100},
                        {333, 100003},
                        {1000, 2147483647}}) {
      std::vector<int32_t> want;
      std::vector<int64_t> sizes;
      StratifiedIndices(seed, k, n, &want, &sizes);
      const uint64_t state0 = Rng(seed).state();
      for (int64_t first = 0; first < k; first += kStratumChunk) {
        uint64_t st = Advance64(HostJumpTable64(), state0, first);
        for (int64_t j = first; j < std::min(k, first + kStratumChunk); ++j) {
          st = Xorshift64Step(st);
          int64_t size = 0;
          REQUIRE(StratifiedIndex(st, j, k, n, &size) == want[j]);
          REQUIRE(size == sizes[j]);
        }
      }
    }
  }
}

TEST_CASE("randomk: the twin's payload is the CPU's") {
  const auto in = Data(50001, 3);
  for (const char* spec : {"randomk ratio=0.01", "randomk ratio=0.3 unbiased=false seed=9"}) {
    auto cpu = Make(spec);
    const StepContext ctx{"layer.weight", 17};
    const std::string want = cpu->EncodeBytes(in.data(), in.size(), ctx);
    ByteReader r(want, "randomk");
    r.Get<uint8_t>("coding");
    const auto k = static_cast<int64_t>(r.GetVarint("k"));
    const auto seed = r.Get<uint64_t>("seed");
    std::string got;
    ByteWriter w(&got);
    w.Put<uint8_t>(2);
    w.PutVarint(k);
    w.Put<uint64_t>(seed);
    const bool unbiased = std::string(spec).find("unbiased=false") == std::string::npos;
    uint64_t st = Rng(seed).state();
    for (int64_t j = 0; j < k; ++j) {
      st = Xorshift64Step(st);
      int64_t size = 0;
      const float v = in[StratifiedIndex(st, j, k, in.size(), &size)];
      w.Put<float>(unbiased ? v * static_cast<float>(size) : v);
    }
    REQUIRE(got == want);
  }
}

TEST_CASE("RadixSelect finds the sorted order statistic, ties and NaN included") {
  for (int trial = 0; trial < 6; ++trial) {
    std::vector<uint32_t> keys;
    uint64_t st = 0x9E3779B97F4A7C15ull + trial;
    const int64_t c = trial == 0 ? 1 : 300 + 517 * trial;
    for (int64_t i = 0; i < c; ++i) {
      st = Xorshift64Step(st);
      const uint64_t r = Xorshift64Out(st);
      // Few distinct keys in odd trials (ties everywhere), NaN and Inf among them.
      const uint32_t pool[] = {0u, 1u, 0x3F800000u, 0x3F800001u, 0x7F800000u, 0x7FC00000u};
      keys.push_back(trial % 2 ? pool[r % 6] : static_cast<uint32_t>(r) & 0x7FFFFFFFu);
    }
    std::vector<uint32_t> sorted = keys;
    std::sort(sorted.begin(), sorted.end(), std::greater<uint32_t>());
    for (int64_t rank : {int64_t{0}, c / 3, c / 2, c - 1}) {
      int64_t greater = -1;
      const uint32_t key = TwinRadixSelect(keys, rank, &greater);
      REQUIRE(key == sorted[rank]);
      REQUIRE(greater ==
              std::count_if(keys.begin(), keys.end(), [&](uint32_t x) { return x > key; }));
    }
  }
}

TEST_CASE("NextTowardZero is nextafter toward zero on magnitudes") {
  const float inf = std::numeric_limits<float>::infinity();
  for (float m :
       {0.f, std::numeric_limits<float>::denorm_min(), 1e-40f, std::numeric_limits<float>::min(),
        0.01f, 1.f, 3e38f, std::numeric_limits<float>::max(), inf}) {
    const float want = std::nextafter(m, 0.f);
    REQUIRE(FloatBits(NextTowardZero(MagnitudeBits(m))) == FloatBits(want));
    REQUIRE(MagnitudeBits(-m) == MagnitudeBits(m));
  }
  REQUIRE(std::isnan(NextTowardZero(MagnitudeBits(std::nanf("")))));
}

TEST_CASE("sampled thresholds: the twin draws the CPU's sample and leaves its Rng state") {
  for (int64_t n : {500, 8192, 10000, 100000, 1000003}) {  // 10000: strides in (1, 2)
    const auto in = Data(n, 11, n % 2 ? 3 : 0);
    for (auto [ratio, m] : {std::pair<double, int64_t>{0.01, 1024}, {0.3, 8192}, {1.0, 50000}}) {
      Rng rng(5);
      uint64_t state = rng.state();
      const float want = SampledAbsThreshold(in.data(), n, ratio, m, &rng);
      REQUIRE(FloatBits(TwinThreshold(in, ratio, m, &state)) == FloatBits(want));
      REQUIRE(state == rng.state());
    }
  }
}

TEST_CASE("topk and dgc: twin payloads and Rng states equal the CPU's, ties included") {
  struct Case {
    std::string spec;
    int64_t n;
    int levels;
  };
  for (const Case& c : std::vector<Case>{{"topk ratio=0.01", 300000, 0},
                                         {"topk ratio=0.1 index_coding=int32", 50000, 2},
                                         {"topk k=700 seed=3", 20000, 1},
                                         {"topk ratio=0.9", 10000, 1},  // fewer non-zeros than k
                                         {"topk ratio=0.05", 5000, 4},
                                         {"dgc ratio=0.01", 300000, 0},
                                         {"dgc ratio=0.2 sample_ratio=0.05 seed=8", 40000, 2},
                                         {"dgc ratio=0.5 index_coding=int32", 9000, 1}}) {
    CAPTURE(c.spec, c.n);
    auto cpu = Make(c.spec);
    const CodecSpec spec = ParseCodecShorthand(c.spec);
    ParamReader r(spec);
    const bool dgc = spec.codec == "dgc";
    const uint8_t coding = r.Choice("index_coding", "delta", {"delta", "int32"}) == "int32" ? 0 : 1;
    const double ratio = r.Double("ratio", 0.01, 0.0, 1.0);
    const int64_t k_param = dgc ? 0 : r.Int("k", 0, 0, std::numeric_limits<int32_t>::max());
    const double sample_ratio = dgc ? r.Double("sample_ratio", 0.01, 1e-6, 1.0) : 0.0;
    uint64_t state = Rng(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max())).state();
    for (uint32_t step = 0; step < 3; ++step) {
      const auto in = Data(c.n, 100 + step, c.levels);
      const std::string want = cpu->EncodeBytes(in.data(), c.n);
      const int64_t k = k_param ? std::min<int64_t>(k_param, c.n) : KFromRatio(ratio, c.n);
      const Sel s = dgc ? TwinDgc(in, ratio, sample_ratio, &state) : TwinTopK(in, k, &state);
      REQUIRE(TwinPayload(s, coding) == want);
      std::string cpu_state;
      cpu->SaveState(&cpu_state);
      REQUIRE(StateOf(state) == cpu_state);
    }
  }
}

TEST_CASE("threshold: the twin filter and delta coding write the CPU's payload") {
  for (int64_t n : {1, 1000, 200003}) {
    const auto in = Data(n, 21, 2);
    for (const char* spec : {"threshold threshold=0.01", "threshold threshold=0.004",
                             "threshold threshold=0.02 index_coding=int32"}) {
      auto cpu = Make(spec);
      const float t =
          static_cast<float>(std::stod(std::string(spec).substr(std::string(spec).find('=') + 1)));
      const uint8_t coding = std::string(spec).find("int32") == std::string::npos ? 1 : 0;
      REQUIRE(TwinPayload(TwinFilter(in, -t, t), coding) == cpu->EncodeBytes(in.data(), n));
    }
  }
}

TEST_CASE("gaussiank: bounds from double sums, and the CPU's payload where the margin is clear") {
  auto cpu = Make("gaussiank ratio=0.01");
  const double z = TwoSidedNormalQuantile(0.01);
  const auto in = Data(100000, 31);
  const auto n = static_cast<int64_t>(in.size());
  double s = 0, q = 0;
  for (float x : in) {
    const float d = x - in[0];
    s += d;
    q += static_cast<double>(d) * d;
  }
  float lo = 0, hi = 0;
  REQUIRE(GaussianBounds(s, q, n, in[0], z, &lo, &hi));
  double mean = 0, sd = 0;
  MeanStd(in.data(), n, &mean, &sd);
  REQUIRE(lo == Approx(static_cast<float>(mean - z * sd)).epsilon(1e-5));
  REQUIRE(hi == Approx(static_cast<float>(mean + z * sd)).epsilon(1e-5));
  float margin = std::numeric_limits<float>::max();
  for (float x : in) margin = std::min({margin, std::fabs(x - lo), std::fabs(x - hi)});
  REQUIRE(margin > 1e-5f * hi);  // this data leaves no element at the edge
  REQUIRE(TwinPayload(TwinFilter(in, lo, hi), 1) == cpu->EncodeBytes(in.data(), n));
  const double nan = std::nan("");
  REQUIRE_FALSE(GaussianBounds(nan, 1.0, 10, 0.f, z, &lo, &hi));
  REQUIRE_FALSE(GaussianBounds(1.0, std::numeric_limits<double>::infinity(), 10, 0.f, z, &lo, &hi));
}

}  // namespace
}  // namespace gradpress::compressors::cuda
