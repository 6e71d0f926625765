// The public API's promises (device_codec.h) that hold for every codec alike: the factory's
// errors, empty tensors as null pointers, Decode returning with its work done, and encodes
// queued together (EncodeAsync, then EncodeFinish) ending as one at a time do.
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

// EncodeAsync queues the work and EncodeFinish completes it: several codecs' encodes queued
// before any finishes (as a worker's call queues its keys, then waits for the gradients) give
// the payloads and states of one Encode at a time, step after step.
TEST_CASE("encodes queued together finish to the payloads of one at a time", "[cuda][api]") {
  const int64_t n = 1 << 18;
  std::vector<std::string> specs = AllSpecs();
  specs.push_back("topk ratio=0.01 error_feedback=true then=qsgd levels=16");
  std::vector<std::unique_ptr<DeviceCodec>> queued, alone;
  for (const std::string& s : specs) {
    queued.push_back(Gpu(s));
    alone.push_back(Gpu(s));
  }
  queued.push_back(MakeDeviceMomentumCorrection(Gpu("dgc"), 0.9));
  alone.push_back(MakeDeviceMomentumCorrection(Gpu("dgc"), 0.9));
  specs.push_back("dgc, momentum correction 0.9");
  std::vector<PinnedBytes> payloads(specs.size());
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> x = Gaussian(n, 10 + step);
    DeviceFloats in(n);
    Upload(x, in.data());
    for (size_t c = 0; c < specs.size(); ++c)
      queued[c]->EncodeAsync(in.data(), n, {"w", step}, &payloads[c], TestStream());
    for (size_t c = 0; c < specs.size(); ++c) queued[c]->EncodeFinish();
    for (size_t c = 0; c < specs.size(); ++c) {
      INFO(specs[c] << ", step " << step);
      const std::string want = GpuEncode(*alone[c], x, {"w", step});
      CHECK(PayloadMismatch(std::string(payloads[c].view()), want) == "");
    }
  }
}

// Which encodes queue without a wait (a worker queues those before the gradients are ready):
// every quantizer; top-k, which guesses its survivors, where its delta-coded payload takes
// the one-wait path (up to 256 KiB of indices and values); not the sparsifiers that read a
// survivor count first.
TEST_CASE("QueuesWithoutWait: quantizers and top-k's guess, not a survivor count", "[cuda][api]") {
  const int64_t vgg = 2359296, big = 25000000;
  for (const char* q : {"none", "fp16", "int8", "qsgd", "terngrad", "onebit"}) {
    INFO(q);
    CHECK(Gpu(q)->QueuesWithoutWait(big));
  }
  CHECK(Gpu("topk ratio=0.01 then=qsgd levels=16")->QueuesWithoutWait(vgg));
  CHECK(Gpu("topk ratio=0.01 error_feedback=true then=qsgd levels=16")->QueuesWithoutWait(vgg));
  CHECK(Gpu("topk ratio=0.01")->QueuesWithoutWait(vgg));
  CHECK_FALSE(Gpu("topk ratio=0.01")->QueuesWithoutWait(big));  // 250k indices: two waits
  CHECK(Gpu("topk ratio=0.01 index_coding=int32")->QueuesWithoutWait(big));
  CHECK(MakeDeviceMomentumCorrection(Gpu("topk ratio=0.01"), 0.9)->QueuesWithoutWait(vgg));
  for (const char* s : {"threshold", "gaussiank", "dgc"}) {
    INFO(s);
    CHECK_FALSE(Gpu(s)->QueuesWithoutWait(vgg));
  }
}

}  // namespace
}  // namespace gradpress::compressors::cuda
