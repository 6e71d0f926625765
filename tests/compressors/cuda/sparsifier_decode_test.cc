// Host twins of the device sparsifiers' decoders (IndexDecoder and ScatterKernel in
// compressors/cuda/sparse_coding.cu, the host checks of DeviceSparsifier::Decode): they must
// accept exactly the payloads the CPU decoders accept, decode them to the same values, and
// flag malformed index bytes with the right DecodeError.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/byte_io.h"
#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/sparsifier_index_logic.h"
#include "tests/compressors/cuda/sparsifier_test_util.h"

namespace gradpress::compressors::cuda {
namespace {

using sparse_testing::Data;
using sparse_testing::Make;

// The exclusive scan of varint ends over [0, len] (IndexDecoder::CountEnds).
std::vector<int32_t> TwinEnds(const uint8_t* p, int64_t len) {
  std::vector<int32_t> ends(len + 1, 0);
  for (int64_t b = 0; b < len; ++b) ends[b + 1] = ends[b] + (IsVarintEnd(p[b]) ? 1 : 0);
  return ends;
}

// The length of the first k varints from the scan of their ends: what VarintsLength, which
// counts eight bytes at a time, must answer.
int64_t ScanDeltaLength(const uint8_t* p, int64_t len, int64_t k) {
  const auto ends = TwinEnds(p, len);
  int64_t length = -1;
  for (int64_t b = 0; b < len; ++b)
    if (IsVarintEnd(p[b]) && ends[b] == k - 1) length = b + 1;
  return length;
}

// IndexDecoder::Delta then ScatterKernel's range check: the positions, or the first error.
int TwinDelta(const uint8_t* p, int64_t len, int64_t k, int64_t n, std::vector<int64_t>* pos) {
  const auto ends = TwinEnds(p, len);
  std::vector<int64_t> steps(k, 0);
  int err = kDecodeOk;
  auto record = [&](int code) { err = err == kDecodeOk ? code : err; };
  for (int64_t b = len - 1; b >= 0; --b) {  // DeltaStepsKernel, any order
    if (b == 0 && (ends[len] != k || !IsVarintEnd(p[len - 1]))) record(kIndexCount);
    if (b > 0 && !IsVarintEnd(p[b - 1])) continue;
    const int64_t j = ends[b];
    if (j >= k) continue;
    int code = kDecodeOk;
    const int64_t step = DeltaStep(p + b, len - b, j, n, &code);
    if (step < 0) record(code);
    steps[j] = step < 0 ? 0 : step;
  }
  if (err != kDecodeOk) return err;
  pos->resize(k);
  std::inclusive_scan(steps.begin(), steps.end(), pos->begin());
  for (int64_t x : *pos)
    if (x < 0 || x >= n) return kIndexOutOfRange;
  return kDecodeOk;
}

// DeviceSparsifier::Decode for a plain (no quantizer) delta or int32 payload: the dense
// result, or nullopt where the device decoder throws.
std::optional<std::vector<float>> TwinDecode(const std::string& bytes, int64_t n) {
  try {
    ByteReader r(bytes, "twin");
    const auto coding = r.Get<uint8_t>("index coding");
    const uint64_t k_raw = r.GetVarint("k");
    GP_ENFORCE(k_raw <= static_cast<uint64_t>(n), "k");
    GP_ENFORCE(coding == 0 || coding == 1, "coding");
    const auto k = static_cast<int64_t>(k_raw);
    const auto* base = reinterpret_cast<const uint8_t*>(bytes.data());
    const size_t at = r.position();
    std::vector<int64_t> pos(k);
    if (coding == 0) {
      r.GetBytes(4 * k, "int32 indices");
      for (int64_t j = 0; j < k; ++j) {
        int32_t idx = 0;
        if (CheckInt32Index(base + at, j, n, &idx) != kDecodeOk) return std::nullopt;
        pos[j] = idx;
      }
    } else if (k > 0) {
      GP_ENFORCE(r.remaining() >= static_cast<size_t>(5 * k), "truncated");
      const int64_t len = static_cast<int64_t>(r.remaining()) - 4 * k;
      r.GetBytes(len, "index varints");
      if (TwinDelta(base + at, len, k, n, &pos) != kDecodeOk) return std::nullopt;
    }
    const size_t values_at = r.position();
    r.GetBytes(4 * k, "values");
    r.ExpectEnd();
    std::vector<float> out(n, 0.f);
    for (int64_t j = 0; j < k; ++j) out[pos[j]] = LoadF32(base + values_at + 4 * j);
    return out;
  } catch (const InvalidArgument&) {
    return std::nullopt;
  }
}

std::optional<std::vector<float>> CpuDecode(const Compressor& c, const std::string& bytes,
                                            int64_t n) {
  try {
    return c.DecodeBytes(bytes, n);
  } catch (const InvalidArgument&) {
    return std::nullopt;
  }
}

TEST_CASE("decode: the twin accepts what the CPU writes and refuses what it refuses") {
  auto cpu = Make("topk ratio=0.05");
  auto cpu32 = Make("topk ratio=0.05 index_coding=int32");
  std::mt19937 gen(77);
  for (int64_t n : {1, 40, 3000}) {
    for (int trial = 0; trial < 300; ++trial) {
      const auto in = Data(n, 1000 + trial, trial % 3);
      std::string bytes = (trial % 2 ? *cpu32 : *cpu).EncodeBytes(in.data(), n);
      if (trial % 4 != 0) {  // mutate one byte, or cut or extend the payload
        const int what = gen() % 4;
        if (what < 2 && !bytes.empty()) bytes[gen() % bytes.size()] = static_cast<char>(gen());
        if (what == 2 && !bytes.empty()) bytes.resize(gen() % bytes.size());
        if (what == 3) bytes.push_back(static_cast<char>(gen()));
      }
      CAPTURE(n, trial);
      const auto twin = TwinDecode(bytes, n), want = CpuDecode(*cpu, bytes, n);
      REQUIRE(twin.has_value() == want.has_value());
      if (twin) REQUIRE(std::memcmp(twin->data(), want->data(), 4 * n) == 0);  // NaN too
    }
  }
}

TEST_CASE("decode: malformed delta varints are flagged with their codes") {
  struct Bad {
    std::vector<uint8_t> region;
    int64_t k, n;
    int code;
  };
  const std::vector<uint8_t> eleven(10, 0x80);
  std::vector<uint8_t> too_long = eleven;
  too_long.push_back(0x00);
  std::vector<uint8_t> overflow(9, 0xFF);
  overflow.push_back(0x02);
  for (const Bad& b : std::vector<Bad>{{too_long, 1, 10, kVarintTooLong},
                                       {overflow, 1, 10, kVarintTooLong},
                                       {{10}, 1, 10, kGapOutOfRange},
                                       {{5, 5}, 2, 10, kIndexOutOfRange},
                                       {{5}, 2, 10, kIndexCount},
                                       {{5, 0x80}, 1, 10, kIndexCount},
                                       {{5, 6}, 1, 10, kIndexCount}}) {
    std::vector<int64_t> pos;
    REQUIRE(TwinDelta(b.region.data(), b.region.size(), b.k, b.n, &pos) == b.code);
    std::string bytes;
    ByteWriter w(&bytes);
    w.Put<uint8_t>(1);
    w.PutVarint(b.k);
    w.PutBytes(b.region.data(), b.region.size());
    bytes.append(4 * b.k, '\0');
    REQUIRE_FALSE(CpuDecode(*Make("threshold"), bytes, b.n));
    REQUIRE_FALSE(TwinDecode(bytes, b.n));
  }
  std::vector<int64_t> pos;
  const std::vector<uint8_t> good{3, 0, 0x81, 0x01};  // indices 3, 4, 134
  REQUIRE(TwinDelta(good.data(), good.size(), 3, 200, &pos) == kDecodeOk);
  REQUIRE(pos == std::vector<int64_t>{3, 4, 134});
}

TEST_CASE("decode: a quantizer follows the k-th varint end (pipelines)") {
  for (int64_t n : {100, 20000}) {
    const auto in = Data(n, 5, 1);
    auto cpu = Make("topk ratio=0.02 then=fp16");
    const std::string bytes = cpu->EncodeBytes(in.data(), n);
    ByteReader r(bytes, "pipeline");
    r.Get<uint8_t>("coding");
    const auto k = static_cast<int64_t>(r.GetVarint("k"));
    const size_t at = r.position();
    for (int64_t j = 0; j < k; ++j) r.GetVarint("gap");
    const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + at;
    const auto window = static_cast<int64_t>(std::min<size_t>(bytes.size() - at, 10 * k));
    REQUIRE(VarintsLength(p, window, k) == static_cast<int64_t>(r.position() - at));
    REQUIRE(VarintsLength(p, k - 1, k) == -1);  // fewer than k ends in the window
  }
}

TEST_CASE("decode: VarintsLength finds the k-th varint end as a scan of the ends does") {
  std::mt19937 gen(7);
  for (int round = 0; round < 2000; ++round) {
    // Bytes with a varint end at about one in `every`, so that k-th ends fall at every offset
    // of the eight-byte steps and some windows hold fewer than k.
    const int every = 1 + static_cast<int>(gen() % 6);
    std::vector<uint8_t> bytes(gen() % 80);
    for (auto& b : bytes)
      b = static_cast<uint8_t>(gen() % every == 0 ? gen() % 0x80 : 0x80 | (gen() % 0x80));
    const auto len = static_cast<int64_t>(bytes.size());
    for (int64_t k = 1; k <= len + 1; ++k) {
      INFO("round " << round << " len " << len << " k " << k);
      REQUIRE(VarintsLength(bytes.data(), len, k) == ScanDeltaLength(bytes.data(), len, k));
    }
  }
}

TEST_CASE("decode: varint parsing follows ByteReader::GetVarint's limits") {
  uint64_t v = 0;
  const std::vector<uint8_t> max64{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
  REQUIRE(ParseVarint(max64.data(), max64.size(), &v) == 10);
  REQUIRE(v == ~uint64_t{0});
  REQUIRE(ParseVarint(max64.data(), 9, &v) == 0);  // the bytes end first
  const std::vector<uint8_t> cont(11, 0x80);
  REQUIRE(ParseVarint(cont.data(), cont.size(), &v) == -1);
  int code = kDecodeOk;
  REQUIRE(DeltaStep(cont.data(), 3, 0, 100, &code) == -1);
  REQUIRE(code == kIndexCount);
  REQUIRE(DeltaStep(cont.data(), cont.size(), 0, 100, &code) == -1);
  REQUIRE(code == kVarintTooLong);
  const uint8_t gap[] = {99};
  REQUIRE(DeltaStep(gap, 1, 0, 100, &code) == 99);
  REQUIRE(DeltaStep(gap, 1, 5, 100, &code) == 100);  // after the first: gap + 1
  REQUIRE(DeltaStep(gap, 1, 5, 99, &code) == -1);
  REQUIRE(code == kGapOutOfRange);
}

TEST_CASE("decode: int32 indices must be in range and strictly increasing") {
  auto check = [](std::vector<int32_t> idx, int64_t n) {
    std::vector<uint8_t> bytes(4 * idx.size());
    for (size_t j = 0; j < idx.size(); ++j) StoreU32(bytes.data() + 4 * j, idx[j]);
    int first = kDecodeOk;
    for (size_t j = 0; j < idx.size() && first == kDecodeOk; ++j) {
      int32_t got = -1;
      first = CheckInt32Index(bytes.data(), j, n, &got);
      REQUIRE(got == idx[j]);
    }
    return first;
  };
  REQUIRE(check({0, 3, 9}, 10) == kDecodeOk);
  REQUIRE(check({3, 2}, 10) == kIndexOrder);
  REQUIRE(check({3, 3}, 10) == kIndexOrder);
  REQUIRE(check({0, 10}, 10) == kIndexOutOfRange);
  REQUIRE(check({-1}, 10) == kIndexOutOfRange);
}

}  // namespace
}  // namespace gradpress::compressors::cuda
