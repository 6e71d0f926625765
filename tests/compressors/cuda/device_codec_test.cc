// The GPU codecs against the CPU codecs, which define the wire formats: for every codec and
// size, the device payload decodes to the same floats on the host and on the device, the
// device decoder takes the CPU's payloads, and the deterministic and seeded codecs write the
// CPU's very bytes (two encodes in a row, so the RNG advances alike) and the CPU's state.
// Every TEST_CASE carries its codec's tag: scripts/gpu/check.sh runs one tag per process,
// since a kernel fault poisons the whole CUDA context.
#include <algorithm>
#include <cmath>
#include <set>

#include "compressors/selection.h"
#include "tests/compressors/cuda/device_test_buffers.h"
#include "tests/compressors/cuda/device_test_compare.h"
#include "tests/compressors/cuda/device_test_util.h"

namespace gradpress::compressors::cuda {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the helpers of this test only

bool IsSparsifier(const std::string& codec) {
  static const std::set<std::string> names = {"topk", "randomk", "threshold", "gaussiank", "dgc"};
  return names.count(codec) > 0;
}

// gaussiank (the device's mean and standard deviation may round differently) and dgc (its
// own threshold sample) choose their elements as the CPU does but need not write its bytes.
bool SamePayloadAsCpu(const CodecSpec& s) { return s.codec != "gaussiank" && s.codec != "dgc"; }
// topk and dgc draw their threshold samples from their RNG as the device sees fit: only the
// state's format is the CPU's.
bool SameStateAsCpu(const CodecSpec& s) { return s.codec != "topk" && s.codec != "dgc"; }

// Indices of the non-zero decoded elements; each must carry the input's exact value.
std::vector<int64_t> Support(const std::vector<float>& x, const std::vector<float>& d) {
  std::vector<int64_t> kept;
  int64_t altered = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] == 0.f) continue;
    kept.push_back(static_cast<int64_t>(i));
    if (d[i] != x[i] && altered++ == 0) {
      FAIL_CHECK("kept element " << i << " decodes to " << d[i] << ", input " << x[i]);
    }
  }
  INFO(altered << " kept elements altered");
  CHECK(altered == 0);
  return kept;
}

int64_t NonZeros(const std::vector<float>& x) {
  return std::count_if(x.begin(), x.end(), [](float v) { return v != 0.f; });
}

// What each plain sparsifier promises about the elements it keeps (default ratio 0.01).
void CheckSelection(const CodecSpec& s, const std::vector<float>& x, const std::vector<float>& d,
                    const std::vector<float>& cpu_d) {
  const auto n = static_cast<int64_t>(x.size());
  const int64_t k = KFromRatio(0.01, n);
  const std::vector<int64_t> kept = Support(x, d);
  const auto m = static_cast<int64_t>(kept.size());
  if (s.codec == "topk") CHECK(m == std::min(k, NonZeros(x)));
  if (s.codec == "gaussiank") {
    // The same rule on a mean and deviation that may differ in the last bits: at most an
    // element or two at the boundary may differ.
    const std::vector<int64_t> cpu_kept = Support(x, cpu_d);
    std::vector<int64_t> diff;
    std::set_symmetric_difference(kept.begin(), kept.end(), cpu_kept.begin(), cpu_kept.end(),
                                  std::back_inserter(diff));
    INFO("device keeps " << m << ", the CPU " << cpu_kept.size());
    CHECK(diff.size() <= 2);
  }
  if (s.codec == "dgc") {
    // At most k, and the m largest magnitudes: no dropped element above a kept one.
    CHECK(m <= k);
    std::vector<bool> is_kept(x.size(), false);
    for (int64_t i : kept) is_kept[i] = true;
    float min_kept = INFINITY, max_dropped = 0.f;
    for (size_t i = 0; i < x.size(); ++i) {
      if (is_kept[i]) {
        min_kept = std::min(min_kept, std::fabs(x[i]));
      } else {
        max_dropped = std::max(max_dropped, std::fabs(x[i]));
      }
    }
    if (m > 0) CHECK(min_kept >= max_dropped);
    // The threshold is lowered until 0.8 k survive; on 100k+ Gaussian elements it gets there.
    if (n >= 100003) CHECK(m >= (k * 4) / 5);
  }
}

// Every property of one codec against the CPU, at every size.
void CheckAgainstCpu(const std::string& shorthand) {
  const CodecSpec spec = Spec(shorthand);
  const CodecSpec twin_spec = CpuTwin(shorthand);
  // randomk scales what it keeps (unbiased); the others send the input's values.
  const bool plain_sparsifier = IsSparsifier(spec.codec) && spec.codec != "randomk" && !spec.then;
  for (const int64_t n : TestSizes()) {
    INFO(shorthand << ", n=" << n);
    const std::vector<float> x = Gaussian(n, 1000 + static_cast<uint32_t>(n));
    const std::vector<float> x2 = Gaussian(n, 2000 + static_cast<uint32_t>(n));
    auto gpu = MakeDeviceCodec(spec);
    auto twin = Cpu(twin_spec);
    auto native = Cpu(spec);
    const std::string name = gpu->Name();
    REQUIRE(name == twin->Name());
    auto device_decoder = MakeDeviceDecoder(name);
    REQUIRE(device_decoder->Name() == name);

    // The device payload decodes to the same floats on both sides.
    const StepContext ctx{"layer.weight", 3}, ctx2{"layer.weight", 4};
    const std::string p = GpuEncode(*gpu, x, ctx);
    const std::vector<float> d_host = CpuDecode(name, p, n);
    const std::vector<float> d_dev = GpuDecode(*device_decoder, p, n);
    CHECK(Mismatch(d_host, d_dev) == "");
    // The device decoder takes the CPU's payloads (qsgd's Elias-coded one included).
    const std::string p_native = CpuEncode(*native, x, ctx);
    const std::vector<float> d_native = CpuDecode(name, p_native, n);
    CHECK(Mismatch(GpuDecode(*device_decoder, p_native, n), d_native) == "");

    // The CPU's very bytes, twice in a row (the RNG streams advance alike).
    const std::string p_twin = CpuEncode(*twin, x, ctx);
    const std::string p2 = GpuEncode(*gpu, x2, ctx2);
    const std::string p2_twin = CpuEncode(*twin, x2, ctx2);
    const bool topk_tie = spec.codec == "topk" &&
                          (TieAtKth(x, KFromRatio(0.01, n)) || TieAtKth(x2, KFromRatio(0.01, n)));
    if (topk_tie) WARN("tie at the k-th magnitude: bytes not compared (" << shorthand << ")");
    if (SamePayloadAsCpu(spec) && !topk_tie) {
      CHECK(PayloadMismatch(p, p_twin) == "");
      CHECK(PayloadMismatch(p2, p2_twin) == "");
    }
    if (plain_sparsifier) CheckSelection(spec, x, d_dev, CpuDecode(name, p_twin, n));

    // Checkpoints: the CPU's state, or at least its format, and either side continues.
    const std::string state = SaveState(*gpu), twin_state = SaveState(*twin);
    CHECK(state.size() == twin_state.size());
    const std::vector<float> x3 = Gaussian(n, 3000 + static_cast<uint32_t>(n));
    const StepContext ctx3{"layer.weight", 5};
    auto restored = MakeDeviceCodec(spec);
    if (SameStateAsCpu(spec)) {
      CHECK(state == twin_state);
      REQUIRE_NOTHROW(restored->LoadState(twin_state));  // a CPU worker's checkpoint
      const std::string p3 = GpuEncode(*restored, x3, ctx3);
      if (SamePayloadAsCpu(spec)) CHECK(PayloadMismatch(p3, CpuEncode(*twin, x3, ctx3)) == "");
    } else {
      REQUIRE_NOTHROW(restored->LoadState(twin_state));
      REQUIRE_NOTHROW(restored->LoadState(state));
      CHECK(PayloadMismatch(GpuEncode(*restored, x3, ctx3), GpuEncode(*gpu, x3, ctx3)) == "");
    }

    // SubtractDecoded: e -= D(the last payload Encode wrote), here that of x3 by `restored`.
    const std::string p3 = GpuEncode(*restored, x3, ctx3);
    DeviceFloats e(n);
    Upload(x3, e.data());
    restored->SubtractDecoded(e.data(), n, TestStream());
    const std::vector<float> d3 = CpuDecode(name, p3, n);
    std::vector<float> want(x3.size());
    for (size_t i = 0; i < x3.size(); ++i) want[i] = x3[i] - d3[i];
    CHECK(Mismatch(Download(e.data(), n), want) == "");
  }
  // Zeros in give zeros out.
  const std::vector<float> zeros(2000, 0.f);
  auto gpu = MakeDeviceCodec(spec);
  const std::string p = GpuEncode(*gpu, zeros, {"zeros", 1});
  for (float v : GpuDecode(*MakeDeviceDecoder(gpu->Name()), p, 2000)) CHECK(v == 0.f);
}

TEST_CASE("none: device payloads are the CPU's", "[cuda][none]") { CheckAgainstCpu("none"); }
TEST_CASE("fp16: device payloads are the CPU's", "[cuda][fp16]") { CheckAgainstCpu("fp16"); }
TEST_CASE("int8: device payloads are the CPU's", "[cuda][int8]") { CheckAgainstCpu("int8"); }
TEST_CASE("qsgd: device payloads are the CPU's fixed-width ones", "[cuda][qsgd]") {
  CheckAgainstCpu("qsgd");
}
TEST_CASE("qsgd elias=false: device payloads are the CPU's", "[cuda][qsgd]") {
  CheckAgainstCpu("qsgd elias=false");
}
TEST_CASE("terngrad: device payloads are the CPU's", "[cuda][terngrad]") {
  CheckAgainstCpu("terngrad");
}
TEST_CASE("onebit: device payloads are the CPU's", "[cuda][onebit]") { CheckAgainstCpu("onebit"); }
TEST_CASE("topk: device payloads are the CPU's", "[cuda][topk]") { CheckAgainstCpu("topk"); }
TEST_CASE("topk index_coding=int32: device payloads are the CPU's", "[cuda][topk]") {
  CheckAgainstCpu("topk index_coding=int32");
}
TEST_CASE("topk then qsgd: device payloads are the CPU's", "[cuda][topk]") {
  CheckAgainstCpu("topk then=qsgd levels=16");
}
TEST_CASE("randomk: device payloads are the CPU's", "[cuda][randomk]") {
  CheckAgainstCpu("randomk");
}
TEST_CASE("randomk then fp16: device payloads are the CPU's", "[cuda][randomk]") {
  CheckAgainstCpu("randomk then=fp16");
}
TEST_CASE("threshold: device payloads are the CPU's", "[cuda][threshold]") {
  CheckAgainstCpu("threshold");
}
TEST_CASE("gaussiank: the device keeps the CPU's elements", "[cuda][gaussiank]") {
  CheckAgainstCpu("gaussiank");
}
TEST_CASE("dgc: the device keeps the largest elements", "[cuda][dgc]") { CheckAgainstCpu("dgc"); }
TEST_CASE("dgc then qsgd: device and CPU decode alike", "[cuda][dgc]") {
  CheckAgainstCpu("dgc then=qsgd");
}

// Ties at the k-th magnitude go to lower indices, and exact zeros are never sent, on both.
// The sparse and all-zero inputs keep fewer than k, and one magnitude everywhere keeps more than
// the survivor buffer holds: the device's speculation on its first sample misses in all three.
TEST_CASE("topk: ties and zeros select as on the CPU", "[cuda][topk]") {
  std::vector<float> ties = Gaussian(100003, 5);
  for (float& v : ties) v = std::round(v / 1e-3f) * 1e-3f;  // ~60 distinct magnitudes
  std::vector<float> sparse(1000, 0.f);
  sparse[3] = 0.5f;
  sparse[500] = -0.25f;
  sparse[999] = 0.125f;
  const std::vector<float> zeros(1000, 0.f);
  std::vector<float> equal = Gaussian(100003, 6);
  for (float& v : equal) v = v < 0 ? -0.5f : 0.5f;
  struct Case {
    const char* shorthand;
    double ratio;   // or
    int64_t fixed;  // k
  };
  for (const Case& c : {Case{"topk", 0.01, 0}, Case{"topk index_coding=int32", 0.01, 0},
                        Case{"topk ratio=0.1", 0.1, 0}, Case{"topk k=7", 0, 7}}) {
    for (const std::vector<float>* x :
         std::vector<const std::vector<float>*>{&ties, &sparse, &zeros, &equal}) {
      INFO(c.shorthand << ", n=" << x->size() << ", non-zeros " << NonZeros(*x));
      const auto n = static_cast<int64_t>(x->size());
      auto gpu = Gpu(c.shorthand);
      const std::string p = GpuEncode(*gpu, *x, {"w", 1});
      CHECK(PayloadMismatch(p, CpuEncode(*Cpu(Spec(c.shorthand)), *x, {"w", 1})) == "");
      const std::vector<float> d = GpuDecode(*MakeDeviceDecoder("topk"), p, n);
      const int64_t k = c.fixed ? std::min(c.fixed, n) : KFromRatio(c.ratio, n);
      CHECK(static_cast<int64_t>(Support(*x, d).size()) == std::min(k, NonZeros(*x)));
    }
  }
}

// SetDensity (DGC's warm-up) changes k on both sides alike.
TEST_CASE("topk: SetDensity keeps the device codec the CPU's", "[cuda][topk]") {
  const std::vector<float> x = Gaussian(100003, 8);
  auto gpu = Gpu("topk");
  auto cpu = Cpu(Spec("topk"));
  REQUIRE(gpu->SetDensity(0.05));
  REQUIRE(cpu->SetDensity(0.05));
  if (!TieAtKth(x, KFromRatio(0.05, 100003))) {
    CHECK(PayloadMismatch(GpuEncode(*gpu, x, {"w", 2}), CpuEncode(*cpu, x, {"w", 2})) == "");
  }
  CHECK_FALSE(Gpu("qsgd")->SetDensity(0.05));
}

// Beyond the list: sparsifiers.cu draws topk's and dgc's threshold samples from the
// codec's Rng exactly as the CPU does, so dgc's bytes and both RNG states should be the CPU's
// too. Reported, not required ([!mayfail]): the sample is theirs to choose.
void CheckSampleMatchesCpu(const std::string& shorthand) {
  for (const int64_t n : TestSizes()) {
    INFO(shorthand << ", n=" << n);
    auto gpu = Gpu(shorthand);
    auto twin = Cpu(CpuTwin(shorthand));
    for (int step = 0; step < 2; ++step) {
      const std::vector<float> x = Gaussian(n, 4000 + step);
      const std::string p = GpuEncode(*gpu, x, {"w", step});
      const std::string p_twin = CpuEncode(*twin, x, {"w", step});
      if (!TieAtKth(x, KFromRatio(0.01, n))) CHECK(PayloadMismatch(p, p_twin) == "");
    }
    CHECK(SaveState(*gpu) == SaveState(*twin));
  }
}

TEST_CASE("dgc: payloads and RNG state are the CPU's", "[cuda][dgc][!mayfail]") {
  CheckSampleMatchesCpu("dgc");
  CheckSampleMatchesCpu("dgc then=qsgd");
}

TEST_CASE("topk: RNG state is the CPU's", "[cuda][topk][!mayfail]") {
  CheckSampleMatchesCpu("topk");
  CheckSampleMatchesCpu("topk then=qsgd levels=16");
}

}  // namespace
}  // namespace gradpress::compressors::cuda
