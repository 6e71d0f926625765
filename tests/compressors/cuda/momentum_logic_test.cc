// The host twin of the device momentum correction (compressors/cuda/momentum_correction.cu):
// MomentumAccumulate and MomentumSent over a tensor, around the same inner codec, keep u, v
// and the payloads of the CPU MomentumCorrection bit for bit, step after step.
#include "compressors/cuda/momentum_logic.h"

#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/codec_spec.h"
#include "compressors/momentum_correction.h"
#include "compressors/registry.h"

namespace gradpress::compressors::cuda {
namespace {

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void CheckTwin(const std::string& shorthand) {
  RegisterBuiltinCompressors();
  const CodecSpec spec = ParseCodecShorthand(shorthand);
  const float m = 0.9f;
  MomentumCorrection cpu(MakeCompressor(spec), m);
  std::unique_ptr<Compressor> inner = MakeCompressor(spec);  // the twin's: same seed, same state
  const int64_t n = 20011;
  std::vector<float> u(n, 0.f), v(n, 0.f), sent(n);
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.f, 0.01f);
  int64_t masked = 0;
  for (int step = 0; step < 6; ++step) {
    INFO(shorthand << ", step " << step);
    std::vector<float> g(n);
    for (float& x : g) x = normal(gen);
    const StepContext ctx{"fc.weight", step};
    std::string want;
    cpu.EncodeTo(g.data(), n, ctx, &want);

    for (int64_t i = 0; i < n; ++i) MomentumAccumulate(m, g[i], &u[i], &v[i]);
    std::string got;
    inner->EncodeTo(v.data(), n, ctx, &got);
    inner->DecodeTo(got, n, sent.data());
    for (int64_t i = 0; i < n; ++i) {
      masked += sent[i] != 0.f && u[i] != 0.f;
      MomentumSent(sent[i], &u[i], &v[i]);
    }
    CHECK(got == want);
    CHECK(SameBits(u, cpu.velocity()));
    CHECK(SameBits(v, cpu.accumulated()));
  }
  CHECK(masked > 0);  // the mask ran: sent elements lost their momentum
}

TEST_CASE("momentum correction: the twin keeps the CPU's u, v and payloads (dgc)") {
  CheckTwin("dgc ratio=0.01");
}

TEST_CASE("momentum correction: the twin keeps the CPU's u, v and payloads (topk then qsgd)") {
  CheckTwin("topk ratio=0.01 then=qsgd levels=4 elias=false");
}

}  // namespace
}  // namespace gradpress::compressors::cuda
