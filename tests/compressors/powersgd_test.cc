// PowerSGD against references written here: exact reconstruction at rank r, the wire
// format's P and Q against torch::mm, warm-started convergence to the SVD's rank-r error,
// byte counts, checkpoint state, and the server path (decode, average, re-encode).
#include "compressors/powersgd.h"

#include <cmath>
#include <cstring>

#include "common/error.h"
#include "compressors/error_feedback.h"
#include "tests/catch_torch.h"
#include "tests/compressors/test_util.h"

namespace gradpress::compressors {
namespace {

using testing::Gradient;
using testing::Make;

// The documented view, recomputed: the largest divisor of n not above sqrt(n).
std::pair<int64_t, int64_t> ReferenceView(int64_t n) {
  int64_t rows = 1;
  for (int64_t d = 1; d * d <= n; ++d)
    if (n % d == 0) rows = d;
  return {rows, n / rows};
}

// A rows x cols matrix of rank r in the codec's view of rows * cols elements, flattened.
torch::Tensor RankR(int64_t rows, int64_t cols, int r, uint64_t seed) {
  torch::manual_seed(seed);
  return torch::mm(torch::randn({rows, r}), torch::randn({r, cols})).flatten() * 0.01;
}

double RelError(const torch::Tensor& got, const torch::Tensor& want) {
  return ((got - want).norm() / want.norm()).item<double>();
}

TEST_CASE("powersgd's view is the squarest divisor pair", "[powersgd]") {
  for (int64_t n : {1, 2, 7, 16, 1000, 4800, 5000, 20000, 100000, 100003, 25000000}) {
    int64_t rows, cols;
    PowerSgdCompressor::MatrixView(n, &rows, &cols);
    CHECK(std::make_pair(rows, cols) == ReferenceView(n));
  }
}

TEST_CASE("powersgd reconstructs a rank-r matrix exactly at rank r", "[powersgd]") {
  // Exact up to float rounding: the Frobenius relative error is float epsilon amplified by
  // the conditioning of P = M Q, measured 1.5e-7 to 9e-6 over these cases; bound 1e-4.
  for (int64_t n : {10000, 24000, 4800}) {
    const auto [rows, cols] = ReferenceView(n);
    for (int r : {1, 2, 4, 7}) {
      INFO("n=" << n << " (" << rows << " x " << cols << ") r=" << r);
      const torch::Tensor m = RankR(rows, cols, r, 31 + r);
      auto c = Make("powersgd rank=" + std::to_string(r));
      CHECK(RelError(c->Decode(c->Encode(m, {"w", 0})), m) < 1e-4);
      // Not vacuous: one rank less cannot reproduce it.
      if (r > 1) {
        auto lower = Make("powersgd rank=" + std::to_string(r - 1));
        CHECK(RelError(lower->Decode(lower->Encode(m, {"w", 0})), m) > 1e-3);
      }
    }
  }
}

TEST_CASE("powersgd's wire format holds orthonormal P and Q = M^T P", "[powersgd]") {
  const int64_t n = 30000;  // 150 x 200
  const torch::Tensor g = Gradient({n}, 5);
  const int r = 3;
  auto c = Make("powersgd rank=3");
  for (int step = 0; step < 3; ++step) {
    const Payload p = c->Encode(g, {"w", step});
    uint32_t rows, cols;
    std::memcpy(&rows, p.bytes.data(), 4);
    std::memcpy(&cols, p.bytes.data() + 4, 4);
    REQUIRE(rows == 150);
    REQUIRE(cols == 200);
    REQUIRE(p.bytes[8] == r);
    REQUIRE(p.bytes.size() == 9 + 4 * r * (rows + cols));
    // Columns on the wire: P^T is r x rows, Q^T is r x cols.
    torch::Tensor pt = torch::empty({r, rows}), qt = torch::empty({r, cols});
    std::memcpy(pt.data_ptr<float>(), p.bytes.data() + 9, 4 * r * rows);
    std::memcpy(qt.data_ptr<float>(), p.bytes.data() + 9 + 4 * r * rows, 4 * r * cols);
    const torch::Tensor m = g.view({150, 200});
    CHECK(torch::allclose(torch::mm(pt, pt.t()), torch::eye(r), 0, 1e-5));
    CHECK(torch::allclose(qt.t(), torch::mm(m.t(), pt.t()), 1e-4, 1e-7));
    CHECK(torch::allclose(c->Decode(p).view({150, 200}), torch::mm(pt.t(), qt), 1e-5, 1e-9));
  }
}

TEST_CASE("powersgd's warm start converges to the best rank-r approximation", "[powersgd]") {
  // M = U diag(s) V^T with a gap after the second singular value: repeated encodes of the
  // same M are a power iteration, so the error falls to the truncated SVD's.
  const auto [rows, cols] = ReferenceView(18000);  // 125 x 144
  torch::manual_seed(4);
  const torch::Tensor u = std::get<0>(torch::linalg_qr(torch::randn({rows, 20})));
  const torch::Tensor v = std::get<0>(torch::linalg_qr(torch::randn({cols, 20})));
  torch::Tensor s = torch::full({20}, 0.1);
  s[0] = 10;
  s[1] = 6;
  const torch::Tensor m = torch::mm(u * s, v.t()).flatten();
  const double best = (s.slice(0, 2).norm() / s.norm()).item<double>();  // rank-2 SVD error
  auto c = Make("powersgd rank=2");
  double first = 0, last = 0;
  for (int step = 0; step < 8; ++step) {
    last = RelError(c->Decode(c->Encode(m, {"w", step})), m);
    if (step == 0) first = last;
  }
  CHECK(first > last);
  CHECK(last < best * 1.001);
  CHECK(last >= best * 0.999);
}

TEST_CASE("powersgd payload bytes equal the header's formula", "[powersgd]") {
  for (int r : {1, 2, 4}) {
    for (int64_t n : {0, 1, 7, 16, 36, 1000, 100000, 100003}) {
      INFO("n=" << n << " r=" << r);
      const auto [rows, cols] = n ? ReferenceView(n) : std::make_pair(int64_t{0}, int64_t{0});
      const bool low_rank = r * (rows + cols) < rows * cols;
      auto c = Make("powersgd rank=" + std::to_string(r));
      const Payload p = c->Encode(Gradient({n}), {"w", 0});
      CHECK(p.bytes.size() ==
            static_cast<size_t>(low_rank ? 9 + 4 * r * (rows + cols) : 9 + 4 * n));
      CHECK(static_cast<int>(p.bytes.at(8)) == (low_rank ? r : 0));
      if (!low_rank) CHECK(torch::equal(c->Decode(p), Gradient({n})));  // raw is lossless
    }
  }
  // The bench's 25M floats: 5000 x 5000 at rank 2.
  CHECK(9 + 4 * 2 * (5000 + 5000) == 80009);
}

TEST_CASE("powersgd decodes statelessly and survives the server path", "[powersgd]") {
  // Two workers push rank-1 gradients (exact at rank 2); the server decodes each with
  // MakeDecoder, averages (rank <= 2) and re-encodes with its own powersgd: the worker
  // decodes exactly the average. (Without error feedback: its residual of float rounding
  // would make the next input full rank; conservation with it is error_feedback_test's.)
  RegisterBuiltinCompressors();
  const auto decoder = MakeDecoder("powersgd");
  auto w0 = Make("powersgd rank=2 seed=3");
  auto w1 = Make("powersgd rank=2 seed=4");
  auto pull = Make("powersgd rank=2");
  for (int step = 0; step < 4; ++step) {
    const torch::Tensor g0 = RankR(90, 100, 1, 100 + step), g1 = RankR(90, 100, 1, 200 + step);
    const torch::Tensor avg = (decoder->Decode(w0->Encode(g0, {"w", step})) +
                               decoder->Decode(w1->Encode(g1, {"w", step}))) /
                              2;
    CHECK(RelError(avg, (g0 + g1) / 2) < 1e-4);
    const Payload down = pull->Encode(avg, {"w", step});
    CHECK(down.codec == "powersgd");
    CHECK(RelError(decoder->Decode(down), avg) < 1e-4);
  }
}

TEST_CASE("powersgd: a zero gradient does not collapse the rank", "[powersgd]") {
  auto c = Make("powersgd rank=2");
  const torch::Tensor zero = torch::zeros({9000});
  CHECK(torch::equal(c->Decode(c->Encode(zero)), zero));
  const torch::Tensor m = RankR(90, 100, 2, 8);
  CHECK(RelError(c->Decode(c->Encode(m)), m) < 1e-4);
}

TEST_CASE("powersgd state restores Q; NaN input leaves it unchanged", "[powersgd]") {
  auto a = Make("powersgd rank=2");
  for (int step = 0; step < 3; ++step) a->Encode(Gradient({9000}, step), {"w", step});
  std::string state;
  a->SaveState(&state);
  CHECK(state.size() == 8 + 1 + 4 + 4 + 4 * 2 * 100);  // Q of the 90 x 100 view
  torch::Tensor bad = Gradient({9000});
  bad[1234] = std::nanf("");
  CHECK_THROWS_AS(a->Encode(bad), InvalidArgument);
  std::string after;
  a->SaveState(&after);
  CHECK(after == state);
  auto b = Make("powersgd rank=2");
  b->LoadState(state);
  const torch::Tensor g = Gradient({9000}, 50);
  CHECK(a->Encode(g).bytes == b->Encode(g).bytes);
  // A state of another rank, or a Q holding NaN, is refused.
  CHECK_THROWS_AS(Make("powersgd rank=4")->LoadState(state), InvalidArgument);
  std::string nan_state = state;
  const float nan = std::nanf("");
  std::memcpy(nan_state.data() + 17, &nan, 4);
  CHECK_THROWS_AS(Make("powersgd rank=2")->LoadState(nan_state), InvalidArgument);
}

TEST_CASE("powersgd decode rejects inconsistent headers and non-finite factors", "[powersgd]") {
  auto c = Make("powersgd");
  const Payload good = c->Encode(Gradient({9000}));
  REQUIRE_NOTHROW(c->Decode(good));
  auto with = [&](size_t offset, const void* v, size_t len) {
    Payload p = good;
    std::memcpy(p.bytes.data() + offset, v, len);
    return p;
  };
  const uint32_t rows = 100, cols = 90, big = 0xFFFFFFFF;
  const uint8_t rank3 = 3, raw = 0;
  const float inf = INFINITY;
  CHECK_THROWS_AS(c->Decode(with(0, &rows, 4)), InvalidArgument);  // 100 x 100 != 9000
  CHECK_THROWS_AS(c->Decode(with(4, &cols, 4)), InvalidArgument);  // 90 x 90
  CHECK_THROWS_AS(c->Decode(with(0, &big, 4)), InvalidArgument);
  CHECK_THROWS_AS(c->Decode(with(8, &rank3, 1)), InvalidArgument);  // lengths disagree
  CHECK_THROWS_AS(c->Decode(with(8, &raw, 1)), InvalidArgument);
  CHECK_THROWS_AS(c->Decode(with(9, &inf, 4)), InvalidArgument);                      // in P
  CHECK_THROWS_AS(c->Decode(with(good.bytes.size() - 4, &inf, 4)), InvalidArgument);  // in Q
}

}  // namespace
}  // namespace gradpress::compressors
