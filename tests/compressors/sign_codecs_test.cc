// signum and the efsignsgd preset against references written here: the momentum
// arithmetic, the scale, byte counts, majority vote through the server, and the preset's
// equivalence with onebit scaling=mean plus error feedback.
#include <cmath>
#include <vector>

#include "common/error.h"
#include "compressors/error_feedback.h"
#include "compressors/onebit.h"
#include "compressors/signum.h"
#include "tests/catch_torch.h"
#include "tests/compressors/test_util.h"

namespace gradpress::compressors {
namespace {

using testing::Gradient;
using testing::Make;

TEST_CASE("signum's momentum and scale match a reference loop", "[signum]") {
  const int64_t n = 3000;
  for (int64_t bucket : {int64_t{1} << 30, int64_t{1000}, int64_t{7}}) {
    INFO("bucket_size=" << bucket);
    auto c = Make("signum beta=0.9 bucket_size=" + std::to_string(bucket));
    const auto* signum = dynamic_cast<const SignumCompressor*>(c.get());
    REQUIRE(signum != nullptr);
    std::vector<float> m(n, 0.f);
    for (int step = 0; step < 6; ++step) {
      const torch::Tensor g = Gradient({n}, 40 + step);
      const float* gp = g.data_ptr<float>();
      const float beta = 0.9f, one_minus = 1.f - beta;
      for (int64_t i = 0; i < n; ++i) m[i] = beta * m[i] + one_minus * gp[i];
      const torch::Tensor d = c->Decode(c->Encode(g, {"w", step}));
      CHECK(signum->momentum() == m);  // bit for bit
      const float* dp = d.data_ptr<float>();
      for (int64_t b = 0; b < n; b += bucket) {
        const int64_t end = std::min(n, b + bucket);
        double l1 = 0;
        for (int64_t i = b; i < end; ++i) l1 += std::fabs(m[i]);
        const double a = l1 / static_cast<double>(end - b);  // ||m||_1 / d
        const float scale = std::fabs(dp[b]);                // sign(0) = +
        for (int64_t i = b; i < end; ++i) REQUIRE(dp[i] == (m[i] < 0.f ? -scale : scale));
        CHECK(std::fabs(scale - a) <= 1e-6 * a);
      }
    }
  }
}

TEST_CASE("signum with beta 0 is signSGD; a zero momentum decodes to zeros", "[signum]") {
  auto c = Make("signum beta=0");
  const torch::Tensor g = Gradient({5000});
  const torch::Tensor d = c->Decode(c->Encode(g));
  const float a = g.abs().mean().item<float>();
  CHECK(torch::allclose(d, torch::where(g < 0, torch::full_like(g, -a), torch::full_like(g, a))));
  auto z = Make("signum");
  CHECK(torch::equal(z->Decode(z->Encode(torch::zeros({100}))), torch::zeros({100})));
}

TEST_CASE("sign codec payload bytes equal the headers' formulas", "[signum]") {
  const int64_t n = 100003;
  const torch::Tensor g = Gradient({n});
  auto ceil_div = [](int64_t a, int64_t b) { return static_cast<size_t>((a + b - 1) / b); };
  auto bytes = [&](const std::string& spec) { return Make(spec)->Encode(g).bytes.size(); };
  CHECK(bytes("signum") == 5 + 4 + ceil_div(n, 8));
  CHECK(bytes("signum bucket_size=1000") == 5 + 4 * ceil_div(n, 1000) + ceil_div(n, 8));
  CHECK(bytes("efsignsgd") == 5 + 4 * ceil_div(n, 1024) + ceil_div(n, 8));
  CHECK(bytes("efsignsgd bucket_size=200000") == 5 + 4 + ceil_div(n, 8));
  CHECK(Make("signum")->Encode(torch::zeros({0})).bytes.size() == 5);
}

TEST_CASE("signum through the server is a majority vote", "[signum]") {
  // Three workers with gradients of +-1 (equal scales): the server averages the decoded
  // signs, and a sign pull codec returns the sign of the majority.
  RegisterBuiltinCompressors();
  const int64_t n = 4001;
  const auto decoder = MakeDecoder("signum");
  std::vector<std::unique_ptr<Compressor>> workers;
  for (int w = 0; w < 3; ++w) workers.push_back(Make("signum beta=0"));
  auto pull = Make("signum beta=0");
  torch::manual_seed(12);
  for (int step = 0; step < 3; ++step) {
    torch::Tensor votes = torch::zeros({n}), avg = torch::zeros({n});
    for (auto& w : workers) {
      const torch::Tensor g = (torch::randint(0, 2, {n}) * 2 - 1).to(torch::kFloat32);
      votes += g;
      avg += decoder->Decode(w->Encode(g, {"w", step})) / 3;
    }
    const torch::Tensor down = decoder->Decode(pull->Encode(avg, {"w", step}));
    CHECK(torch::equal(down.sign(), votes.sign()));
  }
}

TEST_CASE("signum state restores the momentum; NaN input leaves it unchanged", "[signum]") {
  auto a = Make("signum");
  for (int step = 0; step < 3; ++step) a->Encode(Gradient({1000}, step));
  std::string state;
  a->SaveState(&state);
  CHECK(state.size() == testing::VarintLen(1000) + 4000);
  torch::Tensor bad = Gradient({1000});
  bad[3] = INFINITY;
  CHECK_THROWS_AS(a->Encode(bad), InvalidArgument);
  std::string after;
  a->SaveState(&after);
  CHECK(after == state);
  auto b = Make("signum");
  b->LoadState(state);
  CHECK(a->Encode(Gradient({1000}, 9)).bytes == b->Encode(Gradient({1000}, 9)).bytes);
  CHECK_THROWS_AS(b->LoadState(state.substr(0, state.size() - 4)), InvalidArgument);
}

TEST_CASE("signum decode refuses onebit's two-means mode", "[signum]") {
  auto two = Make("onebit scaling=two_means");
  Payload p = two->Encode(Gradient({2000}));
  p.codec = "signum";
  CHECK_THROWS_AS(Make("signum")->Decode(p), InvalidArgument);
}

TEST_CASE("efsignsgd is onebit scaling=mean with error feedback, once", "[efsignsgd]") {
  for (bool ef_flag : {false, true}) {
    INFO("error_feedback=" << ef_flag);
    auto preset = Make("efsignsgd bucket_size=512", "", ef_flag);
    auto* ef = dynamic_cast<ErrorFeedback*>(preset.get());
    REQUIRE(ef != nullptr);
    CHECK(dynamic_cast<const OneBitCompressor*>(&ef->inner()) != nullptr);  // no second residual
    CHECK(preset->Name() == "onebit");
    auto plain = Make("onebit scaling=mean bucket_size=512", "", true);
    for (int step = 0; step < 5; ++step) {
      const torch::Tensor g = Gradient({3000}, 60 + step);
      const Payload p = preset->Encode(g, {"w", step});
      CHECK(p.bytes == plain->Encode(g, {"w", step}).bytes);
      CHECK(torch::equal(MakeDecoder(p.codec)->Decode(p), preset->Decode(p)));
    }
  }
  CHECK_THROWS_AS(Make("efsignsgd scaling=two_means"), InvalidArgument);
}

}  // namespace
}  // namespace gradpress::compressors
