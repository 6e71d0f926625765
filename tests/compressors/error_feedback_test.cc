#include "compressors/error_feedback.h"

#include <cstring>

#include "common/error.h"
#include "tests/catch_torch.h"
#include "tests/compressors/test_util.h"

namespace gradpress::compressors {
namespace {

using testing::Gradient;
using testing::Make;

// Over 50 steps: sum of decoded outputs + final residual == sum of inputs.
void CheckConservation(const std::string& spec, const std::string& then = "") {
  INFO(spec << " " << then);
  auto c = Make(spec, then, /*error_feedback=*/true);
  auto* ef = dynamic_cast<ErrorFeedback*>(c.get());
  REQUIRE(ef != nullptr);
  const int64_t n = 20000;
  torch::Tensor in_sum = torch::zeros({n}, torch::kFloat64);
  torch::Tensor out_sum = torch::zeros({n}, torch::kFloat64);
  for (int step = 0; step < 50; ++step) {
    torch::Tensor g = Gradient({n}, 100 + step);
    in_sum += g.to(torch::kFloat64);
    out_sum += c->Decode(c->Encode(g, {"w", step})).to(torch::kFloat64);
  }
  torch::Tensor residual =
      torch::from_blob(const_cast<float*>(ef->residual().data()), {n}).to(torch::kFloat64);
  const double rel = ((out_sum + residual - in_sum).norm() / in_sum.norm()).item<double>();
  CHECK(rel < 1e-4);
  // And the residual is doing work: without it the sums would differ.
  CHECK((out_sum - in_sum).norm().item<double>() > 0.0);
}

TEST_CASE("error feedback conserves the gradient sum", "[error_feedback]") {
  CheckConservation("topk ratio=0.01");
  CheckConservation("onebit");
  CheckConservation("onebit scaling=mean bucket_size=333");
  CheckConservation("topk ratio=0.01", "qsgd levels=16");
  CheckConservation("qsgd levels=4");
  CheckConservation("powersgd");
  CheckConservation("powersgd rank=4");
  CheckConservation("signum");
}

// A sparse inner codec takes the in-place path (only the kept elements of the residual
// change); its payloads and residual must be those of the dense form p = g + e,
// e = p - D(C(p)), computed here with a twin codec of the same seed.
void CheckSparseMatchesDense(const std::string& spec, const std::string& then = "") {
  INFO(spec << " " << then);
  auto ef = Make(spec, then, /*error_feedback=*/true);
  auto twin = Make(spec, then, /*error_feedback=*/false);
  REQUIRE(twin->IsSparse());
  const int64_t n = 5000;
  std::vector<float> e(n, 0.f), p(n), d(n);
  for (int step = 0; step < 20; ++step) {
    torch::Tensor g = Gradient({n}, 300 + step);
    float* gp = g.data_ptr<float>();
    for (int64_t i = step; i < n; i += 97) gp[i] = (i % 2) ? -0.f : 0.f;  // signed zeros
    std::string got, want;
    ef->EncodeTo(gp, n, {"w", step}, &got);
    for (int64_t i = 0; i < n; ++i) p[i] = gp[i] + e[i];
    twin->EncodeTo(p.data(), n, {"w", step}, &want);
    twin->DecodeTo(want, n, d.data());
    for (int64_t i = 0; i < n; ++i) e[i] = p[i] - d[i];
    REQUIRE(got == want);
    const auto& r = dynamic_cast<ErrorFeedback&>(*ef).residual();
    REQUIRE(std::memcmp(r.data(), e.data(), n * sizeof(float)) == 0);
  }
}

TEST_CASE("error feedback on a sparse codec equals the dense form bit for bit",
          "[error_feedback]") {
  CheckSparseMatchesDense("topk ratio=0.01");
  CheckSparseMatchesDense("topk ratio=0.01", "qsgd levels=16");
  CheckSparseMatchesDense("randomk ratio=0.02 seed=5");
  CheckSparseMatchesDense("gaussiank ratio=0.01");
  CheckSparseMatchesDense("threshold threshold=0.01");
  CheckSparseMatchesDense("topk ratio=0.05", "terngrad");
}

TEST_CASE("error feedback makes top-k send what it skipped", "[error_feedback]") {
  // A constant small gradient is never in the top-k alone; with feedback it accumulates
  // until it is sent.
  auto c = Make("topk k=1", "", true);
  torch::Tensor g = torch::tensor({1.0f, 0.4f, 0.0f});
  torch::Tensor sent = torch::zeros({3});
  for (int step = 0; step < 5; ++step) sent += c->Decode(c->Encode(g, {"w", step}));
  CHECK(sent[1].item<float>() > 0.f);
}

TEST_CASE("error feedback refuses a tensor of another size", "[error_feedback]") {
  auto c = Make("topk", "", true);
  c->Encode(Gradient({100}));
  CHECK_THROWS_AS(c->Encode(Gradient({101})), InvalidArgument);
}

}  // namespace
}  // namespace gradpress::compressors
