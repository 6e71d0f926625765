// Bad payloads on the device decoders: truncated, extended, malformed headers, out-of-range
// indices, levels and symbols, and 200 random single-byte corruptions per codec. Each either
// decodes (then to the CPU's floats) or throws InvalidArgument, writes nothing out of range
// (GpuDecode's guard floats), and leaves the CUDA context healthy for the next decode.
#include <cstring>
#include <limits>
#include <random>
#include <utility>

#include "common/byte_io.h"
#include "common/error.h"
#include "compressors/qsgd.h"
#include "tests/compressors/cuda/device_test_compare.h"
#include "tests/compressors/cuda/device_test_util.h"

namespace gradpress::compressors::cuda {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the helpers of this test only

using Cases = std::vector<std::pair<std::string, std::string>>;  // label, payload

// 999: every bit stream (qsgd 6, terngrad 2, onebit 1 bit per element) ends in padding bits.
constexpr int64_t kN = 999;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string WithFloat(std::string p, size_t at, float v) {
  if (at + sizeof(float) <= p.size()) std::memcpy(&p[at], &v, sizeof(float));
  return p;
}
std::string WithByte(std::string p, size_t at, uint8_t v) {
  if (at < p.size()) p[at] = static_cast<char>(v);
  return p;
}

// A plain sparsifier payload written here: coding, k, then `index_bytes` as given, k values.
std::string SparsePayload(uint8_t coding, uint64_t k, const std::string& index_bytes) {
  std::string p;
  ByteWriter w(&p);
  w.Put<uint8_t>(coding);
  w.PutVarint(k);
  w.PutBytes(index_bytes.data(), index_bytes.size());
  for (uint64_t i = 0; i < k; ++i) w.Put<float>(1.f);
  return p;
}
std::string Varints(std::initializer_list<uint64_t> values) {
  std::string s;
  for (uint64_t v : values) ByteWriter(&s).PutVarint(v);
  return s;
}
std::string Int32s(std::initializer_list<int32_t> values) {
  std::string s;
  for (int32_t v : values) ByteWriter(&s).Put<int32_t>(v);
  return s;
}

// The payloads every decoder of `spec` must refuse, built from a good one of kN elements.
Cases MustRefuse(const CodecSpec& spec, const std::string& good) {
  Cases c = {{"truncated by 1 byte", good.substr(0, good.size() - 1)},
             {"extended by 1 byte", good + '\0'},
             {"extended by 8 bytes", good + std::string(8, '\x5a')},
             {"empty", ""}};
  const std::string& codec = spec.codec;
  if (codec == "topk" || codec == "randomk" || codec == "threshold" || codec == "gaussiank" ||
      codec == "dgc") {
    ByteReader r(good, "test");
    r.Get<uint8_t>("coding");
    r.GetVarint("k");
    std::string more_than_n = good.substr(0, 1);
    ByteWriter(&more_than_n).PutVarint(kN + 1);
    c.push_back({"k > n", more_than_n + good.substr(r.position())});
    c.push_back({"bad coding byte", WithByte(good, 0, 7)});
  }
  if (codec == "topk" || codec == "threshold" || codec == "gaussiank" || codec == "dgc") {
    if (!spec.then) {
      c.push_back({"int32 index = n", SparsePayload(0, 2, Int32s({5, kN}))});
      c.push_back({"int32 index -1", SparsePayload(0, 2, Int32s({-1, 5}))});
      c.push_back({"int32 repeated index", SparsePayload(0, 2, Int32s({5, 5}))});
      c.push_back({"int32 indices descending", SparsePayload(0, 2, Int32s({7, 5}))});
      c.push_back({"delta gap >= n", SparsePayload(1, 2, Varints({5, kN}))});
      c.push_back({"delta index >= n", SparsePayload(1, 2, Varints({5, kN - 6}))});
      c.push_back({"varint of 11 bytes", SparsePayload(1, 1, std::string(10, '\x80') + '\x01')});
      c.push_back({"fewer varints than k", SparsePayload(1, 3, Varints({1, 2}))});
    }
  }
  if (codec == "qsgd" && !spec.then) {
    REQUIRE(good[0] == 0);  // the device writes fixed width: level fields of b bits, then sign
    const int b = QsgdCompressor::LevelBits(16);
    const size_t stream = 7 + 4 * ((kN + 511) / 512);
    const auto first = static_cast<uint8_t>(good[stream]);
    c.push_back({"level s + 1", WithByte(good, stream, (first & ~((1u << b) - 1)) | 17u)});
    c.push_back({"level 2^b - 1", WithByte(good, stream, first | ((1u << b) - 1))});
    c.push_back({"unknown flags", WithByte(good, 0, 4)});
    c.push_back({"levels 0", WithByte(WithByte(good, 1, 0), 2, 0)});
    c.push_back({"bucket_size 0", WithFloat(good, 3, 0.f)});
    c.push_back({"negative norm", WithFloat(good, 7, -1.f)});
    c.push_back({"NaN norm", WithFloat(good, 7, kNaN)});
    c.push_back({"padding bit", WithByte(good, good.size() - 1, good.back() | 0x80)});
  }
  if (codec == "terngrad" && !spec.then) {
    c.push_back({"symbol 3", WithByte(good, 8, static_cast<uint8_t>(good[8]) | 3u)});
    c.push_back({"bucket_size 0", WithFloat(good, 0, 0.f)});
    c.push_back({"negative scale", WithFloat(good, 4, -1.f)});
    c.push_back({"infinite scale", WithFloat(good, 4, INFINITY)});
    c.push_back({"padding bit", WithByte(good, good.size() - 1, good.back() | 0x80)});
  }
  if (codec == "onebit" && !spec.then) {
    c.push_back({"unknown scaling", WithByte(good, 0, 2)});
    c.push_back({"bucket_size 0", WithFloat(good, 1, 0.f)});
    c.push_back({"negative scale", WithFloat(good, 5, -1.f)});
    c.push_back({"padding bit", WithByte(good, good.size() - 1, good.back() | 0x80)});
  }
  if (codec == "int8" && !spec.then) {
    c.push_back({"NaN minimum", WithFloat(good, 0, kNaN)});
    c.push_back({"negative scale", WithFloat(good, 4, -1.f)});
    c.push_back({"infinite scale", WithFloat(good, 4, INFINITY)});
  }
  return c;
}

// Decodes on the device; false when refused with InvalidArgument (anything else fails).
bool GpuDecodes(DeviceCodec& decoder, const std::string& bytes, std::vector<float>* out) {
  try {
    *out = GpuDecode(decoder, bytes, kN);
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}
bool CpuDecodes(const std::string& name, const std::string& bytes, std::vector<float>* out) {
  try {
    *out = CpuDecode(name, bytes, kN);
    return true;
  } catch (const InvalidArgument&) {
    return false;
  }
}

void CheckBadPayloads(const std::string& shorthand) {
  const CodecSpec spec = Spec(shorthand);
  auto gpu = MakeDeviceCodec(spec);
  const std::string name = gpu->Name();
  auto decoder = MakeDeviceDecoder(name);
  const std::vector<float> x = Gaussian(kN, 77);
  const std::string good = GpuEncode(*gpu, x, {"w", 5});
  const std::vector<float> want = CpuDecode(name, good, kN);
  std::vector<float> got;
  REQUIRE(GpuDecodes(*decoder, good, &got));
  REQUIRE(Mismatch(got, want) == "");

  for (const auto& [label, bytes] : MustRefuse(spec, good)) {
    INFO(shorthand << ": " << label);
    CHECK_FALSE(CpuDecodes(name, bytes, &got));  // the case is a bad payload for the CPU too
    CHECK_FALSE(GpuDecodes(*decoder, bytes, &got));
    CHECK(cudaGetLastError() == cudaSuccess);
  }

  // Random single-byte corruptions: decoded or refused, and where both sides decode, alike.
  std::mt19937 gen(31);
  int disagree = 0;
  std::string first_disagreement;
  for (int trial = 0; trial < 200; ++trial) {
    std::string bad = good;
    const size_t at = gen() % bad.size();
    bad[at] = static_cast<char>(static_cast<uint8_t>(bad[at]) ^ (1 + gen() % 255));
    INFO(shorthand << ": byte " << at << " of " << bad.size() << " changed");
    std::vector<float> on_gpu, on_cpu;
    const bool gpu_ok = GpuDecodes(*decoder, bad, &on_gpu);
    const bool cpu_ok = CpuDecodes(name, bad, &on_cpu);
    if (gpu_ok && cpu_ok) CHECK(Mismatch(on_gpu, on_cpu) == "");
    if (gpu_ok != cpu_ok && disagree++ == 0) {
      first_disagreement = "byte " + std::to_string(at) + ": the device " +
                           (gpu_ok ? "decodes" : "refuses") + ", the CPU does not";
    }
  }
  INFO(shorthand << ": " << disagree << " of 200 corruptions judged otherwise than on the CPU; "
                 << first_disagreement);
  CHECK(disagree == 0);

  // The context is healthy and the decoder still decodes.
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
  REQUIRE(GpuDecodes(*decoder, good, &got));
  CHECK(Mismatch(got, want) == "");
}

TEST_CASE("none: bad payloads are refused", "[cuda][none]") { CheckBadPayloads("none"); }
TEST_CASE("fp16: bad payloads are refused", "[cuda][fp16]") { CheckBadPayloads("fp16"); }
TEST_CASE("int8: bad payloads are refused", "[cuda][int8]") { CheckBadPayloads("int8"); }
TEST_CASE("qsgd: bad payloads are refused", "[cuda][qsgd]") { CheckBadPayloads("qsgd"); }
TEST_CASE("terngrad: bad payloads are refused", "[cuda][terngrad]") {
  CheckBadPayloads("terngrad");
}
TEST_CASE("onebit: bad payloads are refused", "[cuda][onebit]") { CheckBadPayloads("onebit"); }
TEST_CASE("topk: bad payloads are refused", "[cuda][topk]") {
  CheckBadPayloads("topk");
  CheckBadPayloads("topk index_coding=int32");
  CheckBadPayloads("topk then=qsgd levels=16");
}
TEST_CASE("randomk: bad payloads are refused", "[cuda][randomk]") {
  CheckBadPayloads("randomk");
  CheckBadPayloads("randomk then=fp16");
}
TEST_CASE("threshold: bad payloads are refused", "[cuda][threshold]") {
  CheckBadPayloads("threshold");
}
TEST_CASE("gaussiank: bad payloads are refused", "[cuda][gaussiank]") {
  CheckBadPayloads("gaussiank");
}
TEST_CASE("dgc: bad payloads are refused", "[cuda][dgc]") {
  CheckBadPayloads("dgc");
  CheckBadPayloads("dgc then=qsgd");
}

}  // namespace
}  // namespace gradpress::compressors::cuda
