// Host tests of the device quantizers' shared logic (compressors/cuda/quantizer_logic.h) and of
// the deterministic codecs' (quantizer_deterministic_logic.h): loops over the kernels' thread
// indices, calling the same GP_HD functions as quantizers.cu and quantizer_onebit.cu, must
// write the CPU codecs' payloads byte for byte and decode them as the CPU codecs do. qsgd and
// terngrad: quantizer_qsgd_test.cc and quantizer_terngrad_test.cc.
#include "compressors/cuda/quantizer_logic.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <limits>
#include <string>
#include <vector>

#include "compressors/bit_pack.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/quantizer_deterministic_logic.h"
#include "compressors/fp16.h"
#include "compressors/int8.h"
#include "compressors/onebit.h"
#include "tests/compressors/cuda/quantizer_test_util.h"

namespace gradpress::compressors::cuda {
namespace {

using testing::CpuEncode;
using testing::FirstBitDifference;
using testing::MakeCpu;
using testing::Mix;
using testing::Record;
using testing::Values;

const std::vector<int64_t> kSizes = {0, 1, 7, 8, 9, 513, 100003};

TEST_CASE("bit stream helpers read and write bit_pack.h's layout", "[cuda][logic]") {
  Rng rng(3);
  for (int width : {1, 2, 6, 9, 17, 32}) {
    std::vector<uint32_t> fields(301);
    for (auto& f : fields)
      f = static_cast<uint32_t>(rng.Next()) & (width == 32 ? ~0u : (1u << width) - 1);
    std::string cpu(fields.size() * 4 + 8, '\0');
    BitWriter w(cpu.data(), cpu.size());
    for (uint32_t f : fields) w.Put(f, width);
    cpu.resize(w.Finish());
    std::vector<uint32_t> words((cpu.size() + 3) / 4, 0);
    for (size_t i = 0; i < fields.size(); ++i) {
      const WordShares s = ShareField(fields[i], i * width, width);
      words[s.word] |= s.lo;
      if (s.hi) words.at(s.word + 1) |= s.hi;
    }
    const auto* bytes = reinterpret_cast<const uint8_t*>(cpu.data());
    for (size_t k = 0; k < cpu.size(); ++k) REQUIRE(WordByte(words.data(), k) == bytes[k]);
    for (size_t i = 0; i < fields.size(); ++i)
      REQUIRE(LoadBits(bytes, i * width, width) == fields[i]);
    const uint64_t total = fields.size() * width;
    CHECK(PaddingClear(bytes[cpu.size() - 1], total));
    if (total % 8) CHECK_FALSE(PaddingClear(bytes[cpu.size() - 1] | 0x80, total));
  }
}

// ---- fp16 ----------------------------------------------------------------------------------

TEST_CASE("fp16: FloatToHalfBits and HalfBitsToFloat are fp16.cc's conversions", "[cuda][logic]") {
  auto check = [](uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    REQUIRE(FloatToHalfBits(f) == FloatToHalf(f));
  };
  for (uint64_t u = 0; u <= 0xFFFFFFFFull; u += 4099) check(static_cast<uint32_t>(u));
  // Densely where rounding is delicate: the half subnormals (nearbyint) and the overflow edge.
  for (uint32_t u = 0x33000000u; u <= 0x38800000u; u += 7) check(u), check(u | 0x80000000u);
  for (uint32_t u = 0x477FE000u; u <= 0x47800100u; ++u) check(u), check(u | 0x80000000u);
  for (uint32_t u : {0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u, 0xFFFFFFFFu, 0u}) check(u);
  for (uint32_t h = 0; h < 65536; ++h)
    REQUIRE(testing::Bits(HalfBitsToFloat(static_cast<uint16_t>(h))) ==
            testing::Bits(HalfToFloat(static_cast<uint16_t>(h))));
}

TEST_CASE("fp16: the kernels' per-element loops write and read fp16.cc's payload",
          "[cuda][logic]") {
  auto cpu = MakeCpu<Fp16Compressor>("fp16");
  for (int64_t n : kSizes) {
    const std::vector<float> v = Values(n, 11 + n, Mix{true, true, true});
    std::string twin(2 * n, '\xCD');
    auto* out = reinterpret_cast<uint8_t*>(twin.data());
    for (int64_t i = 0; i < n; ++i) {  // Fp16EncodeKernel
      const uint16_t h = FloatToHalfBits(v[i]);
      out[2 * i] = static_cast<uint8_t>(h);
      out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
    }
    REQUIRE(twin == CpuEncode(cpu.get(), v));
    std::vector<float> want(n), got(n);
    cpu->DecodeTo(twin, n, want.data());
    for (int64_t i = 0; i < n; ++i)  // Fp16DecodeKernel
      got[i] = HalfBitsToFloat(static_cast<uint16_t>(out[2 * i] | out[2 * i + 1] << 8));
    CHECK(FirstBitDifference(got, want) == -1);
  }
}

// ---- int8 ----------------------------------------------------------------------------------

// Int8ReduceKernel and Int8EncodeKernel with `threads` grid-stride threads.
std::string Int8Twin(const std::vector<float>& v, int64_t threads, int* err) {
  const auto n = static_cast<int64_t>(v.size());
  uint64_t lo_key = ~uint64_t{0}, hi_key = ~uint64_t{0};
  for (int64_t t = 0; t < threads; ++t) {
    uint64_t lo = ~uint64_t{0}, hi = ~uint64_t{0};
    bool bad = false;
    for (int64_t i = t; i < n; i += threads) {
      lo = std::min(lo, MinKey(v[i], static_cast<uint32_t>(i)));
      hi = std::min(hi, MaxKey(v[i], static_cast<uint32_t>(i)));
      bad |= !FiniteF(v[i]);
    }
    if (bad) Record(err, kNonFiniteInput);
    lo_key = std::min(lo_key, lo);
    hi_key = std::min(hi_key, hi);
  }
  const float lo = n ? v[KeyIndex(lo_key)] : 0.f, hi = n ? v[KeyIndex(hi_key)] : 0.f;
  const float scale = Int8Scale(lo, hi);
  const float inv = Int8Inverse(scale);
  const bool wide = Int8Wide(lo, hi);
  std::string out(8 + n, '\xCD');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  StoreF32(p, lo);
  StoreF32(p + 4, scale);
  for (int64_t i = 0; i < n; ++i) p[8 + i] = Int8Level(v[i], lo, inv, wide);
  return out;
}

std::vector<float> Int8DecodeTwin(const std::string& payload, int64_t n) {
  const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
  const float lo = LoadF32(p), scale = LoadF32(p + 4);
  const bool wide = Int8WideDecode(scale);
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = Int8Value(lo, scale, p[8 + i], wide);
  return out;
}

void CheckInt8(const std::vector<float>& v) {
  auto cpu = MakeCpu<Int8Compressor>("int8");
  const std::string want = CpuEncode(cpu.get(), v);
  for (int64_t threads : {1, 3, 256}) {
    int err = 0;
    REQUIRE(Int8Twin(v, threads, &err) == want);
    CHECK(err == 0);
  }
  const auto n = static_cast<int64_t>(v.size());
  std::vector<float> decoded(n);
  cpu->DecodeTo(want, n, decoded.data());
  CHECK(FirstBitDifference(Int8DecodeTwin(want, n), decoded) == -1);
}

TEST_CASE("int8: the reduction and level loops write int8.cc's payload", "[cuda][logic]") {
  for (int64_t n : kSizes) CheckInt8(Values(n, 5 + n, Mix{true, true, true}));
  for (int64_t n : kSizes) CheckInt8(Values(n, 9 + n, Mix{true, false, false, true}));
  // The first of equal extremes: only the sign of a zero min or max shows in the header.
  CheckInt8({0.f, -0.f, 1.f});
  CheckInt8({-0.f, 0.f, 1.f});
  CheckInt8({2.f, -0.f, 0.f, -0.f});
  CheckInt8({-1.f, 0.f, -0.f});
  CheckInt8({-0.f});
  CheckInt8({0.f, 0.f});
  CheckInt8({3.5f, 3.5f});
  // hi - lo overflows float: levels in double.
  CheckInt8({-3e38f, 3e38f, 0.f, 1e38f, -2.9e38f, 1.f});
  CheckInt8({1e-45f, -1e-45f, 0.f});  // subnormal scale without a finite inverse
}

TEST_CASE("int8: NaN and Inf inputs are flagged where int8.cc throws", "[cuda][logic]") {
  auto cpu = MakeCpu<Int8Compressor>("int8");
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (const std::vector<float>& v :
       {std::vector<float>{1.f, nan, 2.f}, {nan, 1.f}, {-inf, 0.f}, {0.f, inf}}) {
    CHECK_THROWS_AS(CpuEncode(cpu.get(), v), InvalidArgument);
    int err = 0;
    Int8Twin(v, 2, &err);
    CHECK(err == kNonFiniteInput);
  }
}

TEST_CASE("int8: decode of a range wider than FLT_MAX goes through double", "[cuda][logic]") {
  auto cpu = MakeCpu<Int8Compressor>("int8");
  std::string payload(8 + 256, '\0');
  auto* p = reinterpret_cast<uint8_t*>(payload.data());
  StoreF32(p, -3.3e38f);
  StoreF32(p + 4, 2.6e36f);  // 255 * scale overflows float, lo + q * scale does not
  for (int q = 0; q < 256; ++q) p[8 + q] = static_cast<uint8_t>(q);
  std::vector<float> want(256);
  cpu->DecodeTo(payload, 256, want.data());
  CHECK(FirstBitDifference(Int8DecodeTwin(payload, 256), want) == -1);
}

// ---- onebit --------------------------------------------------------------------------------

// OneBitEncodeKernel: a group of eight threads per bucket.
std::string OneBitTwin(const std::vector<float>& v, uint32_t bucket, bool two_means, int* err) {
  const auto n = static_cast<int64_t>(v.size());
  const int per = two_means ? 2 : 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  std::string out(5 + 4 * per * nb + (n + 7) / 8, '\xCD');
  auto* p = reinterpret_cast<uint8_t*>(out.data());
  uint8_t* scales = p + 5;
  uint8_t* signs = scales + 4 * per * nb;
  p[0] = two_means ? 1 : 0;
  StoreU32(p + 1, bucket);
  for (int64_t kb = 0; kb < nb; ++kb) {
    const int64_t first = kb * bucket, len = std::min<int64_t>(bucket, n - first);
    const int64_t full = len - len % 8;
    OneBitLane lanes[8];
    auto element = [&](int j, int64_t e) {
      OneBitAdd(&lanes[j], v[e]);
      if ((e & 7) == 0) signs[e >> 3] = SignByte(v.data(), n, e >> 3);
    };
    for (int j = 0; j < 8; ++j) {
      for (int64_t i = j; i < full; i += 8) element(j, first + i);
      if (j == 0)
        for (int64_t i = full; i < len; ++i) element(0, first + i);
    }
    OneBitTotals totals;
    for (const auto& lane : lanes) OneBitCombine(&totals, lane);
    if (OneBitBad(totals)) Record(err, kNonFiniteInput);
    float scale[2];
    OneBitScales(totals, len, two_means, scale);
    StoreF32(scales + 4 * per * kb, scale[0]);
    if (two_means) StoreF32(scales + 4 * (2 * kb + 1), scale[1]);
  }
  return out;
}

// OneBitDecodeKernel.
std::vector<float> OneBitDecodeTwin(const std::string& payload, int64_t n, int* err) {
  const auto* p = reinterpret_cast<const uint8_t*>(payload.data());
  const bool two_means = p[0] == 1;
  const uint32_t bucket = LoadU32(p + 1);
  const int per = two_means ? 2 : 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  const uint8_t* scales = p + 5;
  const uint8_t* signs = scales + 4 * per * nb;
  if (n > 0 && !PaddingClear(signs[(n + 7) / 8 - 1], n)) Record(err, kPaddingBits);
  std::vector<float> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t k = static_cast<uint32_t>(i) / bucket;
    const float a = LoadF32(scales + 4 * per * k);
    const float b = two_means ? LoadF32(scales + 4 * (2 * k + 1)) : a;
    if (!(FiniteF(a) && FiniteF(b) && a >= 0.f && b >= 0.f)) Record(err, kBadScale);
    out[i] = (signs[i >> 3] >> (i & 7)) & 1 ? -b : a;
  }
  return out;
}

TEST_CASE("onebit: the group-per-bucket loops write and read onebit.cc's payload",
          "[cuda][logic]") {
  for (const char* scaling : {"two_means", "mean"}) {
    for (uint32_t bucket : {1u, 3u, 8u, 9u, 1024u, 100000u}) {
      auto cpu = MakeCpu<OneBitCompressor>(std::string("onebit scaling=") + scaling +
                                           " bucket_size=" + std::to_string(bucket));
      for (int64_t n : kSizes) {
        const std::vector<float> v = Values(n, 17 * n + bucket, Mix{true, true, true});
        int err = 0;
        const std::string twin = OneBitTwin(v, bucket, scaling[0] == 't', &err);
        CHECK(err == 0);
        REQUIRE(twin == CpuEncode(cpu.get(), v));
        std::vector<float> want(n);
        cpu->DecodeTo(twin, n, want.data());
        REQUIRE(FirstBitDifference(OneBitDecodeTwin(twin, n, &err), want) == -1);
        CHECK(err == 0);
      }
    }
  }
}

TEST_CASE("onebit: bad input and bad payloads are flagged where onebit.cc throws",
          "[cuda][logic]") {
  auto cpu = MakeCpu<OneBitCompressor>("onebit bucket_size=16");
  // 3e38 twice in one float lane overflows it: onebit.cc refuses that as an Inf element.
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), 3e38f}) {
    std::vector<float> v = Values(18, 2);
    v[0] = v[8] = bad;
    v[17] = -bad;
    CHECK_THROWS_AS(CpuEncode(cpu.get(), v), InvalidArgument);
    int err = 0;
    OneBitTwin(v, 16, true, &err);
    CHECK(err == kNonFiniteInput);
  }
  const std::vector<float> v = Values(9, 1);
  int err = 0;
  const std::string good = OneBitTwin(v, 16, true, &err);
  std::string padded = good;
  padded.back() = static_cast<char>(padded.back() | 0x80);
  std::vector<float> out(9);
  CHECK_THROWS_AS(cpu->DecodeTo(padded, 9, out.data()), InvalidArgument);
  OneBitDecodeTwin(padded, 9, &err);
  CHECK(err == kPaddingBits);
  std::string negative = good;
  StoreF32(reinterpret_cast<uint8_t*>(negative.data()) + 5 + 4, -1.f);
  err = 0;
  CHECK_THROWS_AS(cpu->DecodeTo(negative, 9, out.data()), InvalidArgument);
  OneBitDecodeTwin(negative, 9, &err);
  CHECK(err == kBadScale);
}

}  // namespace
}  // namespace gradpress::compressors::cuda
