// Properties every registered codec must have, run over the registry (plus the pipeline).
#include <cmath>
#include <limits>
#include <random>

#include "common/error.h"
#include "tests/catch_torch.h"
#include "tests/compressors/test_util.h"

namespace gradpress::compressors {
namespace {

using testing::Gradient;
using testing::Make;

// Every registered codec, plus the survey's method-5 pipeline and a randomk pipeline.
std::vector<std::pair<std::string, std::string>> AllCodecs() {
  RegisterBuiltinCompressors();
  std::vector<std::pair<std::string, std::string>> specs;
  for (const auto& name : RegisteredCompressorNames()) specs.emplace_back(name, "");
  specs.emplace_back("topk", "qsgd levels=16");
  specs.emplace_back("randomk", "terngrad");
  specs.emplace_back("qsgd elias=false", "");
  specs.emplace_back("topk index_coding=int32", "");
  return specs;
}

std::string Label(const std::pair<std::string, std::string>& s) {
  return s.second.empty() ? s.first : s.first + " then " + s.second;
}

TEST_CASE("the registry holds the whole catalogue", "[conformance]") {
  RegisterBuiltinCompressors();
  const auto names = RegisteredCompressorNames();
  for (const char* want : {"none", "fp16", "int8", "qsgd", "terngrad", "onebit", "topk", "randomk",
                           "threshold", "gaussiank", "dgc", "powersgd", "signum"}) {
    CHECK(std::find(names.begin(), names.end(), want) != names.end());
  }
}

TEST_CASE("shape and dtype survive a round trip", "[conformance]") {
  for (const auto& spec : AllCodecs()) {
    INFO(Label(spec));
    auto c = Make(spec.first, spec.second);
    for (auto dtype : {torch::kFloat32, torch::kFloat16, torch::kFloat64}) {
      torch::Tensor g = Gradient({3, 40, 50}).to(dtype);
      Payload p = c->Encode(g, {"w", 1});
      CHECK(p.codec == c->Name());
      CHECK(p.shape == std::vector<int64_t>{3, 40, 50});
      torch::Tensor d = c->Decode(p);
      CHECK(d.sizes() == g.sizes());
      CHECK(d.scalar_type() == dtype);
      CHECK(d.device().is_cpu());
    }
    // Scalars and empty tensors too.
    for (auto shape : {std::vector<int64_t>{}, std::vector<int64_t>{0}, std::vector<int64_t>{1}}) {
      torch::Tensor g = Gradient(shape);
      CHECK(c->Decode(c->Encode(g)).sizes() == g.sizes());
    }
  }
}

TEST_CASE("zeros in give zeros out", "[conformance]") {
  for (const auto& spec : AllCodecs()) {
    INFO(Label(spec));
    auto c = Make(spec.first, spec.second);
    torch::Tensor z = torch::zeros({2000});
    CHECK(torch::equal(c->Decode(c->Encode(z, {"w", 3})).abs(), z));
  }
}

TEST_CASE("lossy payloads are smaller than the dense tensor", "[conformance]") {
  torch::Tensor g = Gradient({1000000});
  for (const auto& spec : AllCodecs()) {
    INFO(Label(spec));
    auto c = Make(spec.first, spec.second);
    Payload p = c->Encode(g, {"w", 0});
    if (c->IsLossless()) {
      CHECK(p.bytes.size() == 4000000u);
    } else {
      CHECK(p.bytes.size() < 4000000u);
    }
  }
}

TEST_CASE("decode rejects truncated, extended and random bytes", "[conformance]") {
  torch::Tensor g = Gradient({1000});
  std::mt19937 gen(11);
  for (const auto& spec : AllCodecs()) {
    INFO(Label(spec));
    auto c = Make(spec.first, spec.second);
    const Payload good = c->Encode(g, {"w", 5});
    REQUIRE_NOTHROW(c->Decode(good));
    const size_t len = good.bytes.size();
    for (size_t cut : {size_t{0}, size_t{1}, len / 2, len - 1}) {
      Payload bad = good;
      bad.bytes.resize(std::min(cut, len - 1));
      CHECK_THROWS_AS(c->Decode(bad), InvalidArgument);
    }
    for (size_t extra : {1, 8}) {
      Payload bad = good;
      bad.bytes.append(extra, '\x5a');
      CHECK_THROWS_AS(c->Decode(bad), InvalidArgument);
    }
    for (int trial = 0; trial < 20; ++trial) {
      Payload bad = good;
      size_t n = std::uniform_int_distribution<size_t>(0, 2 * len)(gen);
      if (n == len) ++n;
      bad.bytes.resize(n);
      for (auto& ch : bad.bytes) ch = static_cast<char>(gen());
      CHECK_THROWS_AS(c->Decode(bad), InvalidArgument);
    }
    // Random content at the valid length may decode (e.g. for none) but never crashes and
    // never throws anything but InvalidArgument; AddressSanitizer checks the reads.
    for (int trial = 0; trial < 20; ++trial) {
      Payload bad = good;
      for (auto& ch : bad.bytes) ch = static_cast<char>(gen());
      int64_t decoded = 1000;
      try {
        decoded = c->Decode(bad).numel();
      } catch (const InvalidArgument&) {
      }
      CHECK(decoded == 1000);
    }
    // A payload of another codec is refused.
    Payload other = good;
    other.codec = "something-else";
    CHECK_THROWS_AS(c->Decode(other), InvalidArgument);
  }
}

TEST_CASE("a codec restored from its saved state continues the same stream", "[conformance]") {
  // Checkpoints: after 3 steps, a fresh codec (with error feedback) given the saved state
  // encodes step 4 to the very bytes the original does (residual and RNG stream restored).
  for (const auto& spec : AllCodecs()) {
    INFO(Label(spec));
    auto a = Make(spec.first, spec.second, /*error_feedback=*/true);
    for (int step = 0; step < 3; ++step) a->Encode(Gradient({5000}, 7 + step), {"w", step});
    std::string state;
    a->SaveState(&state);
    auto b = Make(spec.first, spec.second, true);
    b->LoadState(state);
    const torch::Tensor g = Gradient({5000}, 99);
    CHECK(a->Encode(g, {"w", 3}).bytes == b->Encode(g, {"w", 3}).bytes);
    // A state that is cut short or belongs to nothing is refused, never half-applied.
    auto c = Make(spec.first, spec.second, true);
    CHECK_THROWS_AS(c->LoadState(std::string_view(state).substr(0, state.size() / 2 + 1)),
                    InvalidArgument);
    CHECK_THROWS_AS(c->LoadState(state + "x"), InvalidArgument);
  }
}

// Found by gradpress-fuzz-decode (scripts/fuzz.sh): the raw kernels on an empty tensor pass
// null buffers (an empty vector's data()), which memcpy and memset must never see -- UB that
// UndefinedBehaviorSanitizer (GP_SANITIZE=undefined) reports.
TEST_CASE("every codec's raw kernels take an empty tensor as null pointers", "[conformance]") {
  for (const auto& spec : AllCodecs()) {
    INFO(Label(spec));
    auto c = Make(spec.first, spec.second);
    std::string bytes;
    c->EncodeTo(nullptr, 0, {"w", 1}, &bytes);
    CHECK_NOTHROW(c->DecodeTo(bytes, 0, nullptr));
  }
}

// Found by gradpress-fuzz-decode: quantizers wrote floats and halves through float* and
// uint16_t* at whatever offset the payload had reached (after a sparsifier's indices, or
// onebit's 5-byte header) -- misaligned stores, UB. They decode as they did.
TEST_CASE("quantizers after a sparsifier's indices encode at odd offsets", "[conformance]") {
  torch::Tensor g = Gradient({999});
  for (const char* quantizer : {"onebit", "terngrad", "fp16", "int8", "qsgd"}) {
    INFO(quantizer);
    // k = 999 of 999: the values are all of g, after 1 + 2 + 3996 bytes of indices.
    auto c = Make("topk ratio=1 index_coding=int32", quantizer);
    const Payload p = c->Encode(g, {"w", 1});
    torch::Tensor d = c->Decode(p);
    CHECK(d.sizes() == g.sizes());
    CHECK(torch::isfinite(d).all().item<bool>());
    if (std::string(quantizer) == "fp16") CHECK(torch::allclose(d, g, 1e-3, 1e-5));
  }
}

// Found by gradpress-fuzz-decode (an error-feedback residual restored with a NaN): int8's
// min/max scan skipped a NaN that was not the first element, and a range wider than FLT_MAX
// made the scale infinite; both cast NaN to uint8_t (UB, garbage levels).
TEST_CASE("int8 refuses NaN anywhere and encodes a range wider than FLT_MAX", "[conformance]") {
  auto c = Make("int8");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::vector<float>& x :
       {std::vector<float>{nan, 1.f, 2.f}, std::vector<float>{1.f, nan, 2.f},
        std::vector<float>{1.f, 2.f, nan}}) {
    CHECK_THROWS_AS(c->EncodeBytes(x.data(), 3), InvalidArgument);
  }
  const std::vector<float> wide = {-3e38f, 0.f, 3e38f, 1e38f};
  const std::vector<float> back = c->DecodeBytes(c->EncodeBytes(wide.data(), 4), 4);
  const double step = 6e38 / 255;
  for (size_t i = 0; i < wide.size(); ++i) {
    INFO(wide[i] << " decoded as " << back[i]);
    CHECK(std::isfinite(back[i]));
    CHECK(std::abs(static_cast<double>(back[i]) - wide[i]) <= step);
  }
}

}  // namespace
}  // namespace gradpress::compressors
