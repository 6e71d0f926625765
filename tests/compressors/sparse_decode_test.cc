// Compressor::DecodeSparse, the decode the server adds sparse pushes from in O(payload): for
// every sparse codec it yields what DecodeTo writes (values at increasing indices, zero
// elsewhere, bit for bit) and refuses exactly the bytes DecodeTo refuses, with its message.
#include <cstring>
#include <random>

#include "common/error.h"
#include "compressors/sparsifier.h"
#include "tests/catch_torch.h"
#include "tests/compressors/test_util.h"

namespace gradpress::compressors {
namespace {

using testing::Gradient;
using testing::Make;

// The message DecodeTo or DecodeSparse throws on `bytes`, "" if it decodes.
template <typename F>
std::string Refusal(F&& decode) {
  try {
    decode();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("sparse decode yields what the dense decode writes, and refuses the same bytes",
          "[sparse]") {
  RegisterBuiltinCompressors();
  const std::vector<std::pair<std::string, std::string>> sparse = {
      {"topk ratio=0.05", ""},
      {"topk index_coding=int32", ""},
      {"topk ratio=0.05", "qsgd levels=16"},
      {"topk", "qsgd levels=4 elias=false"},
      {"randomk ratio=0.05", ""},
      {"randomk", "terngrad"},
      {"threshold threshold=0.01", ""},
      {"gaussiank ratio=0.05", ""},
      {"dgc ratio=0.05", ""}};
  const int64_t n = 3000;
  torch::Tensor g = Gradient({n});
  g.index_put_({torch::indexing::Slice(0, 40)}, -0.0);  // -0.0 values must survive as such
  std::mt19937 gen(5);
  for (const auto& [spec, then] : sparse) {
    INFO(spec << " then " << then);
    auto enc = Make(spec, then);
    const Payload p = enc->Encode(g, {"w", 3});
    auto dec = MakeDecoder(p.codec);
    REQUIRE(dec->IsSparse());
    std::vector<float> dense(n, 1.f);
    dec->DecodeTo(p.bytes, n, dense.data());
    std::vector<int32_t> idx;
    std::vector<float> val;
    REQUIRE(dec->DecodeSparse(p.bytes, n, &idx, &val));
    REQUIRE(idx.size() == val.size());
    for (size_t j = 1; j < idx.size(); ++j) REQUIRE(idx[j - 1] < idx[j]);
    std::vector<float> scattered(n, 2.f);
    Scatter(idx, val.data(), n, scattered.data());
    CHECK(std::memcmp(dense.data(), scattered.data(), n * sizeof(float)) == 0);
    // Malformed: cut, extended, random bytes, one flipped byte.
    std::vector<std::string> bad = {p.bytes.substr(0, p.bytes.size() / 2), p.bytes + "\x5a"};
    for (int t = 0; t < 20; ++t) {
      std::string b = p.bytes;
      b[std::uniform_int_distribution<size_t>(0, b.size() - 1)(gen)] ^= 0x40;
      bad.push_back(b);
      std::string r(std::uniform_int_distribution<size_t>(0, 64)(gen), '\0');
      for (auto& ch : r) ch = static_cast<char>(gen());
      bad.push_back(r);
    }
    for (const std::string& b : bad) {
      const std::string want = Refusal([&] { dec->DecodeTo(b, n, dense.data()); });
      CHECK(Refusal([&] { dec->DecodeSparse(b, n, &idx, &val); }) == want);
    }
  }
}

TEST_CASE("dense codecs say so and read nothing as sparse", "[sparse]") {
  RegisterBuiltinCompressors();
  for (const char* name : {"none", "qsgd", "fp16", "onebit", "terngrad"}) {
    INFO(name);
    auto dec = MakeDecoder(name);
    CHECK_FALSE(dec->IsSparse());
    std::vector<int32_t> idx;
    std::vector<float> val;
    CHECK_FALSE(dec->DecodeSparse("garbage", 4, &idx, &val));
  }
}

}  // namespace
}  // namespace gradpress::compressors
