// The GPU codecs' statistics and state across steps: qsgd and terngrad are unbiased by the CPU
// suite's criterion (tests/compressors/reference_test.cc), error feedback conserves the
// gradient mass with the CPU's residual, and NaN input is refused as the CPU refuses it.
#include <cmath>
#include <limits>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/error_feedback.h"
#include "compressors/momentum_correction.h"
#include "compressors/selection.h"
#include "tests/compressors/cuda/device_test_buffers.h"
#include "tests/compressors/cuda/device_test_compare.h"
#include "tests/compressors/cuda/device_test_util.h"

namespace gradpress::compressors::cuda {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the helpers of this test only

// ---- unbiasedness ----------------------------------------------------------------------

// reference_test.cc's input, drawn here without LibTorch: 1000 magnitudes in [0.5, 1] x 0.01
// with random signs, seeded.
std::vector<float> UnbiasInput() {
  std::mt19937 gen(2);
  std::uniform_real_distribution<float> mag(0.5f, 1.f);
  std::vector<float> g(1000);
  for (float& v : g) v = mag(gen) * 0.01f * (gen() % 2 ? 1.f : -1.f);
  return g;
}

// The standard deviation of one stochastic rounding of |g| / unit: unit sqrt(p (1 - p)).
std::vector<double> RoundingSigma(const std::vector<float>& g, const std::vector<double>& unit) {
  std::vector<double> sigma(g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double r = std::fabs(static_cast<double>(g[i])) / unit[i];
    const double p = r - std::floor(r);
    sigma[i] = unit[i] * std::sqrt(p * (1 - p));
  }
  return sigma;
}

// qsgd: unit = ||bucket|| / s (L2 or max norm).
std::vector<double> QsgdSigma(const std::vector<float>& g, int s, size_t bucket, bool max_norm) {
  std::vector<double> unit(g.size());
  for (size_t b = 0; b < g.size(); b += bucket) {
    const size_t end = std::min(g.size(), b + bucket);
    double norm = 0;
    for (size_t i = b; i < end; ++i) {
      const double v = std::fabs(static_cast<double>(g[i]));
      norm = max_norm ? std::max(norm, v) : norm + v * v;
    }
    if (!max_norm) norm = std::sqrt(norm);
    for (size_t i = b; i < end; ++i) unit[i] = norm / s;
  }
  return RoundingSigma(g, unit);
}

// reference_test.cc's criterion: the mean of 2000 decodes lies within 4 standard errors
// (sigma / sqrt(2000)) of the input, element-wise, plus 1e-6 relative for float rounding.
// `round_trip` adds one decode of an encode of g (step 0, as there) to sum.
template <typename RoundTrip>
void CheckUnbiased(const std::string& label, const std::vector<float>& g,
                   const std::vector<double>& sigma, RoundTrip&& round_trip) {
  INFO(label);
  const int trials = 2000;
  std::vector<double> sum(g.size(), 0.0);
  for (int t = 0; t < trials; ++t) round_trip(&sum);
  int64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::fabs(sum[i] / trials - g[i]);
    const double bound = 4 * sigma[i] / std::sqrt(trials) + 1e-6 * std::fabs(g[i]);
    bad += err > bound;
    worst = std::max(worst, err / bound);
  }
  INFO("elements outside 4 SE: " << bad << ", max err/bound " << worst);
  CHECK(bad == 0);
}

// The device codec, and for calibration its CPU twin (the same stream: same payloads), which
// must pass with this input and seed as the CPU suite's codecs do.
void CheckUnbiasedBothSides(const std::string& shorthand, const std::vector<double>& sigma) {
  const std::vector<float> g = UnbiasInput();
  const auto n = static_cast<int64_t>(g.size());
  auto twin = Cpu(CpuTwin(shorthand));
  const std::string name = twin->Name();
  auto cpu_decoder = MakeDecoder(name);
  std::string bytes;
  std::vector<float> out(g.size());
  CheckUnbiased("CPU " + shorthand, g, sigma, [&](std::vector<double>* sum) {
    bytes.clear();
    twin->EncodeTo(g.data(), n, {"fc1.weight", 0}, &bytes);
    cpu_decoder->DecodeTo(bytes, n, out.data());
    for (size_t i = 0; i < out.size(); ++i) (*sum)[i] += out[i];
  });

  auto gpu = Gpu(shorthand);
  auto decoder = MakeDeviceDecoder(name);
  DeviceFloats in(n), decoded(n);
  Upload(g, in.data());
  PinnedBytes payload;
  CheckUnbiased("device " + shorthand, g, sigma, [&](std::vector<double>* sum) {
    gpu->Encode(in.data(), n, {"fc1.weight", 0}, &payload, TestStream());
    decoder->Decode(payload.view(), n, decoded.data(), TestStream());
    const std::vector<float> d = Download(decoded.data(), n);
    for (size_t i = 0; i < d.size(); ++i) (*sum)[i] += d[i];
  });
}

TEST_CASE("qsgd: the device's decodes are unbiased", "[cuda][qsgd]") {
  const std::vector<float> g = UnbiasInput();
  CheckUnbiasedBothSides("qsgd levels=16", QsgdSigma(g, 16, 512, false));
  CheckUnbiasedBothSides("qsgd levels=4 bucket_size=128", QsgdSigma(g, 4, 128, false));
  CheckUnbiasedBothSides("qsgd levels=2 norm=max", QsgdSigma(g, 2, 512, true));
  CheckUnbiasedBothSides("qsgd levels=300 bucket_size=1000", QsgdSigma(g, 300, 1000, false));
}

TEST_CASE("terngrad: the device's decodes are unbiased", "[cuda][terngrad]") {
  // b ~ Bernoulli(|g| / max|g|) scaled by max|g|: rounding with unit max|g|.
  const std::vector<float> g = UnbiasInput();
  double max_abs = 0;
  for (float v : g) max_abs = std::max(max_abs, std::fabs(static_cast<double>(v)));
  CheckUnbiasedBothSides("terngrad", RoundingSigma(g, std::vector<double>(g.size(), max_abs)));
}

// ---- error feedback --------------------------------------------------------------------

// The residual in an error-feedback state (error_feedback.h: varint numel, the floats, then
// the inner codec's state); *inner receives the rest.
std::vector<float> ResidualOf(const std::string& state, std::string* inner) {
  ByteReader r(state, "error feedback state");
  const uint64_t n = r.GetVarint("residual numel");
  std::string_view raw = r.GetBytes(n * sizeof(float), "residual");
  std::vector<float> residual(n);
  if (n > 0) std::memcpy(residual.data(), raw.data(), raw.size());
  *inner = std::string(r.Rest());
  return residual;
}

// Over 5 steps the payloads are the CPU ErrorFeedback's, the residual stays the CPU's, and
// sum of decodes + final residual == sum of inputs (up to float rounding).
void CheckErrorFeedback(const std::string& shorthand, bool same_inner_state) {
  for (const int64_t n : {int64_t{4099}, int64_t{100003}}) {
    INFO(shorthand << ", n=" << n);
    auto gpu = Gpu(shorthand);
    auto cpu = Cpu(CpuTwin(shorthand));
    auto* cpu_ef = dynamic_cast<ErrorFeedback*>(cpu.get());
    REQUIRE(cpu_ef != nullptr);
    const std::string name = cpu->Name();
    std::vector<double> sum_in(n, 0.0), sum_out(n, 0.0), scale(n, 0.0);
    for (int step = 0; step < 5; ++step) {
      INFO("step " << step);
      const std::vector<float> x = Gaussian(n, 50 + step);
      std::vector<float> corrected(x);  // what the codec sees: topk's bytes need no tie there
      for (size_t i = 0; i < cpu_ef->residual().size(); ++i) corrected[i] += cpu_ef->residual()[i];
      const StepContext ctx{"fc1.weight", step};
      const std::string p = GpuEncode(*gpu, x, ctx);
      const std::string p_cpu = CpuEncode(*cpu, x, ctx);
      const bool tie = name == "topk" && TieAtKth(corrected, KFromRatio(0.01, n));
      if (!tie) CHECK(PayloadMismatch(p, p_cpu) == "");
      const std::vector<float> d = CpuDecode(name, p, n);
      for (int64_t i = 0; i < n; ++i) {
        sum_in[i] += x[i];
        sum_out[i] += d[i];
        scale[i] += std::fabs(x[i]);
      }
    }
    std::string inner, cpu_inner;
    const std::vector<float> residual = ResidualOf(SaveState(*gpu), &inner);
    const std::vector<float> cpu_residual = ResidualOf(SaveState(*cpu), &cpu_inner);
    REQUIRE(static_cast<int64_t>(residual.size()) == n);
    CHECK(Mismatch(residual, cpu_residual) == "");
    if (same_inner_state) CHECK(inner == cpu_inner);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double err = std::fabs(sum_out[i] + residual[i] - sum_in[i]);
      bad += err > 1e-5 * (scale[i] + std::fabs(residual[i])) + 1e-12;
    }
    CHECK(bad == 0);
  }
}

TEST_CASE("topk: error feedback on the device conserves the gradient", "[cuda][topk]") {
  CheckErrorFeedback("topk ratio=0.01 error_feedback=true", false);
}

TEST_CASE("qsgd: error feedback on the device conserves the gradient", "[cuda][qsgd]") {
  CheckErrorFeedback("qsgd error_feedback=true", true);
}

// ---- DGC's momentum correction ---------------------------------------------------------

// Over 5 steps the payloads and the state (u, v, the inner codec's) are the CPU
// MomentumCorrection's; a device codec loaded with the CPU's state continues with its bytes.
void CheckMomentum(const std::string& shorthand) {
  const int64_t n = 100003;
  INFO(shorthand);
  auto gpu = MakeDeviceMomentumCorrection(Gpu(shorthand), 0.9);
  MomentumCorrection cpu(Cpu(CpuTwin(shorthand)), 0.9);
  for (int step = 0; step < 5; ++step) {
    INFO("step " << step);
    const std::vector<float> x = Gaussian(n, 70 + step);
    const StepContext ctx{"fc1.weight", step};
    CHECK(PayloadMismatch(GpuEncode(*gpu, x, ctx), CpuEncode(cpu, x, ctx)) == "");
  }
  CHECK(SaveState(*gpu) == SaveState(cpu));
  auto resumed = MakeDeviceMomentumCorrection(Gpu(shorthand), 0.9);
  resumed->LoadState(SaveState(cpu));
  const std::vector<float> x = Gaussian(n, 80);
  const StepContext ctx{"fc1.weight", 5};
  CHECK(PayloadMismatch(GpuEncode(*resumed, x, ctx), CpuEncode(cpu, x, ctx)) == "");
  CHECK(SaveState(*resumed) == SaveState(cpu));
}

TEST_CASE("dgc: momentum correction on the device keeps the CPU's u, v and payloads",
          "[cuda][dgc]") {
  CheckMomentum("dgc ratio=0.01");
  CheckMomentum("topk ratio=0.01 then=qsgd levels=16");
}

// ---- NaN input -------------------------------------------------------------------------

// int8, qsgd and onebit refuse NaN anywhere, as their CPU codecs do, and the device codec
// encodes the next valid input as if nothing had happened. terngrad's CPU codec means to
// (terngrad.cc's isfinite check) but never does: std::max(m, NaN) keeps m, and the NaN
// encodes as 0. Its device codec may refuse NaN or write the CPU's bytes, nothing else.
void CheckRefusesNaN(const std::string& shorthand) {
  const bool cpu_refuses = shorthand != "terngrad";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const int64_t n : {int64_t{1000}, int64_t{1} << 20}) {
    for (const int64_t at : {int64_t{0}, n / 2 + 1, n - 1}) {
      INFO(shorthand << ", n=" << n << ", NaN at " << at);
      std::vector<float> x = Gaussian(n, 9);
      x[at] = nan;
      std::string cpu_bytes, gpu_bytes;
      bool cpu_threw = false, gpu_threw = false;
      try {
        cpu_bytes = CpuEncode(*Cpu(CpuTwin(shorthand)), x, {"w", 1});
      } catch (const InvalidArgument&) {
        cpu_threw = true;
      }
      CHECK(cpu_threw == cpu_refuses);
      auto gpu = Gpu(shorthand);
      try {
        gpu_bytes = GpuEncode(*gpu, x, {"w", 1});
      } catch (const InvalidArgument&) {
        gpu_threw = true;
      }
      if (cpu_refuses) {
        CHECK(gpu_threw);
      } else if (!gpu_threw) {
        CHECK(PayloadMismatch(gpu_bytes, cpu_bytes) == "");
      }
      CHECK(cudaGetLastError() == cudaSuccess);
      x[at] = 0.f;
      const std::string p = GpuEncode(*gpu, x, {"w", 2});
      CHECK(Mismatch(GpuDecode(*MakeDeviceDecoder(gpu->Name()), p, n),
                     CpuDecode(gpu->Name(), p, n)) == "");
    }
  }
}

TEST_CASE("int8: NaN input is refused", "[cuda][int8]") { CheckRefusesNaN("int8"); }
TEST_CASE("qsgd: NaN input is refused", "[cuda][qsgd]") { CheckRefusesNaN("qsgd"); }
TEST_CASE("terngrad: NaN input is refused", "[cuda][terngrad]") { CheckRefusesNaN("terngrad"); }
TEST_CASE("onebit: NaN input is refused", "[cuda][onebit]") { CheckRefusesNaN("onebit"); }

}  // namespace
}  // namespace gradpress::compressors::cuda
