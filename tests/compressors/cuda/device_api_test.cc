// The public API's promises (device_codec.h) that hold for every codec alike: the factory's
// errors, empty tensors as null pointers, and Decode returning with its work done.
#include "common/error.h"
#include "tests/compressors/cuda/device_test_buffers.h"
#include "tests/compressors/cuda/device_test_compare.h"
#include "tests/compressors/cuda/device_test_util.h"

namespace gradpress::compressors::cuda {
namespace {

using namespace testing;  // NOLINT(build/namespaces): the helpers of this test only

// The codecs of the list (tests/compressors/cuda/device_codec_test.cc runs each).
const std::vector<std::string>& AllSpecs() {
  static const std::vector<std::string> specs = {"none",
                                                 "fp16",
                                                 "int8",
                                                 "qsgd",
                                                 "qsgd elias=false",
                                                 "terngrad",
                                                 "onebit",
                                                 "topk",
                                                 "topk index_coding=int32",
                                                 "randomk",
                                                 "threshold",
                                                 "gaussiank",
                                                 "dgc",
                                                 "topk then=qsgd levels=16",
                                                 "randomk then=fp16",
                                                 "dgc then=qsgd"};
  return specs;
}

TEST_CASE("the device factory refuses what it cannot build", "[cuda][api]") {
  for (const char* bad : {"powersgd", "signum", "efsignsgd", "nosuch", "topk ratoi=0.1",
                          "qsgd levels=0", "qsgd bucket_size=0", "topk ratio=2",
                          "topk ratio=0.1 k=5", "qsgd then=fp16", "topk then=powersgd"}) {
    INFO(bad);
    CHECK_THROWS_AS(Gpu(bad), InvalidArgument);
  }
  for (const char* bad : {"nosuch", "topk+qsgd+fp16", "powersgd"}) {
    INFO(bad);
    CHECK_THROWS_AS(MakeDeviceDecoder(bad), InvalidArgument);
  }
}

// As the CPU kernels do (conformance_test.cc): n = 0 with null pointers, and the payload of
// an empty tensor is the CPU's.
TEST_CASE("every device codec takes an empty tensor as null pointers", "[cuda][api]") {
  for (const std::string& shorthand : AllSpecs()) {
    INFO(shorthand);
    auto gpu = Gpu(shorthand);
    PinnedBytes payload;
    REQUIRE_NOTHROW(gpu->Encode(nullptr, 0, {"w", 1}, &payload, TestStream()));
    const std::string p(payload.view());
    const CodecSpec twin = CpuTwin(shorthand);
    if (twin.codec != "gaussiank" && twin.codec != "dgc") {
      CHECK(PayloadMismatch(p, CpuEncode(*Cpu(twin), {}, {"w", 1})) == "");
    }
    CHECK_NOTHROW(MakeDeviceDecoder(gpu->Name())->Decode(p, 0, nullptr, TestStream()));
    CHECK_NOTHROW(gpu->SubtractDecoded(nullptr, 0, TestStream()));
    CHECK(cudaGetLastError() == cudaSuccess);
  }
}

// Decode returns once out is written: nothing of it is left pending on the stream.
TEST_CASE("device decodes return with their work done", "[cuda][api]") {
  const int64_t n = 1 << 20;
  const std::vector<float> x = Gaussian(n, 4);
  DeviceFloats out(n);
  for (const std::string& shorthand : AllSpecs()) {
    INFO(shorthand);
    auto gpu = Gpu(shorthand);
    const std::string p = GpuEncode(*gpu, x, {"w", 1});
    PinnedBytes pinned;
    pinned.Resize(p.size());
    if (!p.empty()) std::memcpy(pinned.data(), p.data(), p.size());
    auto decoder = MakeDeviceDecoder(gpu->Name());
    decoder->Decode(pinned.view(), n, out.data(), TestStream());
    CHECK(cudaStreamQuery(TestStream()) == cudaSuccess);
    CHECK(Mismatch(Download(out.data(), n), CpuDecode(gpu->Name(), p, n)) == "");
  }
}

}  // namespace
}  // namespace gradpress::compressors::cuda
