#include "compressors/momentum_correction.h"

#include "common/error.h"
#include "tests/catch_torch.h"
#include "tests/compressors/test_util.h"

namespace gradpress::compressors {
namespace {

using testing::Gradient;
using testing::Make;

std::vector<float> Floats(const torch::Tensor& t) {
  torch::Tensor c = t.contiguous().to(torch::kFloat32);
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

TEST_CASE("momentum correction accumulates, sends, and masks exactly the sent coordinates",
          "[dgc]") {
  const int64_t n = 5000;
  const float m = 0.9f;
  for (const char* spec : {"dgc ratio=0.01", "topk ratio=0.01"}) {
    INFO(spec);
    MomentumCorrection mc(Make(spec), m);
    std::vector<float> u(n, 0.f), v(n, 0.f);  // the reference
    for (int step = 0; step < 6; ++step) {
      const torch::Tensor g = Gradient({n}, 40 + step);
      const std::vector<float> gv = Floats(g);
      for (int64_t i = 0; i < n; ++i) {
        u[i] = m * u[i] + gv[i];
        v[i] += u[i];
      }
      const std::vector<float> sent = Floats(mc.Decode(mc.Encode(g, {"w", step})));
      int64_t sent_count = 0;
      for (int64_t i = 0; i < n; ++i) {
        if (sent[i] != 0.f) {
          ++sent_count;
          CHECK(sent[i] == v[i]);  // a pure sparsifier sends the accumulated value itself
          CHECK(mc.velocity()[i] == 0.f);
          CHECK(mc.accumulated()[i] == 0.f);
          u[i] = v[i] = 0.f;
        } else {
          CHECK(mc.velocity()[i] == u[i]);
          CHECK(mc.accumulated()[i] == v[i]);
        }
      }
      CHECK(sent_count > 0);
      CHECK(sent_count < n / 20);
    }
  }
}

TEST_CASE("momentum correction with a quantizer keeps the unsent remainder", "[dgc]") {
  // With qsgd after the sparsifier, v keeps v - D(C(v)): nothing is lost, only delayed.
  MomentumCorrection mc(Make("topk ratio=0.01", "qsgd levels=4"), 0.9);
  const int64_t n = 4000;
  torch::Tensor u_sum = torch::zeros({n}, torch::kFloat64), sent_sum = u_sum.clone();
  torch::Tensor u = torch::zeros({n});
  for (int step = 0; step < 30; ++step) {
    const torch::Tensor g = Gradient({n}, 70 + step);
    const torch::Tensor before = torch::from_blob(const_cast<float*>(mc.velocity().data()),
                                                  {static_cast<int64_t>(mc.velocity().size())})
                                     .clone();
    const torch::Tensor s = mc.Decode(mc.Encode(g, {"w", step}));
    // u after the step, before masking, is 0.9 u_before + g; it entered v.
    u_sum += ((before.numel() ? before : torch::zeros({n})) * 0.9 + g).to(torch::kFloat64);
    sent_sum += s.to(torch::kFloat64);
  }
  torch::Tensor v = torch::from_blob(const_cast<float*>(mc.accumulated().data()), {n});
  const double rel =
      ((sent_sum + v.to(torch::kFloat64) - u_sum).norm() / u_sum.norm()).item<double>();
  CHECK(rel < 1e-4);
}

TEST_CASE("momentum correction state round-trips and forwards the density", "[dgc]") {
  MomentumCorrection a(Make("topk ratio=0.01"), 0.9);
  for (int step = 0; step < 3; ++step) a.Encode(Gradient({3000}, step), {"w", step});
  std::string state;
  a.SaveState(&state);
  MomentumCorrection b(Make("topk ratio=0.01"), 0.9);
  b.LoadState(state);
  const torch::Tensor g = Gradient({3000}, 99);
  CHECK(a.Encode(g, {"w", 3}).bytes == b.Encode(g, {"w", 3}).bytes);
  MomentumCorrection c(Make("topk ratio=0.01"), 0.9);
  CHECK_THROWS_AS(c.LoadState(std::string_view(state).substr(0, 20)), InvalidArgument);
  // SetDensity reaches the sparsifier: 25% density keeps 750 of 3000.
  REQUIRE(c.SetDensity(0.25));
  const torch::Tensor s = c.Decode(c.Encode(g, {"w", 0}));
  CHECK(s.ne(0).sum().item<int64_t>() == 750);
  MomentumCorrection q(Make("qsgd"), 0.9);
  CHECK_FALSE(q.SetDensity(0.5));  // a quantizer has no density
  CHECK_THROWS_AS(MomentumCorrection(Make("topk"), 1.0), InvalidArgument);
}

}  // namespace
}  // namespace gradpress::compressors
