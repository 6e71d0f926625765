// KeyCodecs (worker/client/key_codecs.h) on every device the build has: a call's payloads equal
// what each key's codec writes on its own for the same floats, over steps (error feedback carries
// state), and a pulled payload decodes into a host or CUDA tensor to the codec's floats. On a
// CUDA build with a GPU the gradients are CUDA tensors: the large key takes the device codec,
// the others one batch of copies to pinned memory (CopyToHost), and decodes copy up without a
// wait (CopyFromHost); without a GPU only the host half runs.
#include "worker/client/key_codecs.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/byte_io.h"
#include "common/config.h"
#include "common/error.h"
#include "compressors/registry.h"
#include "compressors/sparsifier.h"
#include "tests/catch_torch.h"

namespace gradpress::worker {
namespace {

const std::vector<compressors::TensorSpec> kModel = {
    {"small", {10}},                    // under min_numel: lossless, sent as the tensor itself
    {"mid", {3, 5, 7}},                 // compressed on the host
    {"transposed", {40, 30}},           // compressed, handed over non-contiguous
    {"big", {(int64_t{1} << 18) + 3}},  // compressed on the device when it is a CUDA tensor
};

std::vector<torch::Tensor> Gradients(int step, const torch::Device& device) {
  torch::manual_seed(100 + step);
  std::vector<torch::Tensor> g;
  for (const auto& s : kModel) {
    if (s.key == "transposed") {
      g.push_back(torch::randn({s.shape[1], s.shape[0]}).to(device).t());
    } else {
      g.push_back(torch::randn(s.shape).to(device));
    }
  }
  return g;
}

std::string Bytes(const KeyPush& p) {
  if (!p.raw.defined()) return p.payload.payload.bytes;
  return {static_cast<const char*>(p.raw.data_ptr()), p.raw.numel() * sizeof(float)};
}

void CheckDevice(const torch::Device& device) {
  ClientOptions o;
  o.push = ParseCodecShorthand("topk ratio=0.01 error_feedback=true");
  o.min_numel = 64;
  KeyCodecs codecs(o);
  codecs.SetModel(kModel, {});
  compressors::RegisterBuiltinCompressors();
  std::vector<std::unique_ptr<compressors::Compressor>> own;  // each key's codec on its own
  for (const auto& s : kModel)
    own.push_back(compressors::MakeCompressor(s.key == "small" ? CodecSpec{} : o.push));
  for (int step = 0; step < 3; ++step) {
    const std::vector<torch::Tensor> grads = Gradients(step, device);
    // Odd steps hand over where the gradients were complete (on CUDA a recorded mark: the
    // codecs' side streams wait for it), even steps no mark (they wait for all queued work).
    CudaMark ready;
    if (device.is_cuda()) ready.Record();
    StepMetrics m;
    const std::vector<KeyPush> pushes =
        codecs.Encode(step, grads, 0, kModel.size(), &m, step % 2 ? &ready : nullptr);
    REQUIRE(pushes.size() == kModel.size());
    for (size_t i = 0; i < kModel.size(); ++i) {
      INFO("step " << step << ", key " << kModel[i].key);
      const torch::Tensor host = grads[i].cpu().contiguous();
      const std::string want =
          own[i]->EncodeBytes(host.data_ptr<float>(), host.numel(), {kModel[i].key, step});
      CHECK(pushes[i].payload.key == kModel[i].key);
      CHECK(pushes[i].payload.payload.codec == own[i]->Name());
      CHECK(Bytes(pushes[i]) == want);

      compressors::Payload p = pushes[i].payload.payload;
      p.bytes = want;
      p.shape = kModel[i].shape;
      torch::Tensor out = torch::full(kModel[i].shape, 7.0f, torch::TensorOptions(device));
      uint64_t bytes = 0;
      codecs.Decode(i, p, &out, &bytes);
      CHECK(bytes == want.size());
      const std::vector<float> dense = own[i]->DecodeBytes(want, host.numel());
      const torch::Tensor got = out.cpu().contiguous();  // waits for the copy up
      CHECK(std::memcmp(got.data_ptr<float>(), dense.data(), dense.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("KeyCodecs' payloads equal each key's codec and decode to its floats, host and CUDA",
          "[key_codecs][cuda]") {
  CheckDevice(torch::kCPU);
  if (torch::cuda::is_available()) CheckDevice(torch::Device(torch::kCUDA));
}

// A device decode that does not wait (DecodeChecks): a good payload is in the tensor once
// checked; one whose index bytes only the kernels can find malformed writes nothing, and its
// error comes from the check, not the call. Needs a GPU (the device path); skipped without.
TEST_CASE("a deferred device decode writes a good payload and leaves a malformed one out",
          "[key_codecs][cuda]") {
  if (!torch::cuda::is_available()) return;
  ClientOptions o;
  o.push = ParseCodecShorthand("topk ratio=0.01");
  KeyCodecs codecs(o);
  codecs.SetModel(kModel, {});
  const size_t big = kModel.size() - 1;
  const torch::Tensor g = torch::randn(kModel[big].shape);
  const auto cpu = compressors::MakeCompressor(o.push);
  compressors::Payload p;
  p.codec = cpu->Name();
  p.shape = kModel[big].shape;
  p.bytes = cpu->EncodeBytes(g.data_ptr<float>(), g.numel(), {"big", 0});
  const std::vector<float> dense = cpu->DecodeBytes(p.bytes, g.numel());
  const auto cuda = torch::TensorOptions(torch::kCUDA);

  torch::Tensor out = torch::full(kModel[big].shape, 7.0f, cuda);
  DecodeChecks later;
  uint64_t bytes = 0;
  codecs.Decode(big, p, &out, &bytes, &later);
  later.Check();
  const torch::Tensor got = out.cpu().contiguous();
  CHECK(std::memcmp(got.data_ptr<float>(), dense.data(), dense.size() * sizeof(float)) == 0);

  // Delta coding: u8 coding, varint k, the index varints, then 4k bytes of values. Index bytes
  // all 0xff form no varint the kernels accept; the host sees only the sizes, which still fit.
  ByteReader header(p.bytes, "topk payload");
  REQUIRE(header.Get<uint8_t>("coding") == static_cast<uint8_t>(compressors::IndexCoding::kDelta));
  const auto k = static_cast<size_t>(header.GetVarint("k"));
  REQUIRE(p.bytes.size() > header.position() + 4 * k);
  for (size_t b = header.position(); b < p.bytes.size() - 4 * k; ++b) p.bytes[b] = '\xff';
  torch::Tensor kept = torch::full(kModel[big].shape, 7.0f, cuda);
  CHECK_NOTHROW(codecs.Decode(big, p, &kept, &bytes, &later));
  CHECK_THROWS_AS(later.Check(), InvalidArgument);
  CHECK(kept.eq(7.0f).all().item<bool>());
  // Without `later` the same payload throws in the call.
  CHECK_THROWS_AS(codecs.Decode(big, p, &kept, &bytes), InvalidArgument);
  CHECK(kept.eq(7.0f).all().item<bool>());
}

TEST_CASE("KeyCodecs: a kept push is sent again as it was, and no codec state moves",
          "[key_codecs]") {
  ClientOptions o;
  o.push = ParseCodecShorthand("topk ratio=0.01 error_feedback=true");
  o.min_numel = 64;
  KeyCodecs codecs(o), twin(o);  // twin: the same steps without the resend
  codecs.SetModel(kModel, {});
  twin.SetModel(kModel, {});
  const torch::Device cpu(torch::kCPU);
  StepMetrics m;
  codecs.KeepNextPushes();
  const std::vector<KeyPush> sent = codecs.Encode(0, Gradients(0, cpu), 0, kModel.size(), &m);
  twin.Encode(0, Gradients(0, cpu), 0, kModel.size(), &m);
  std::vector<KeyPush> kept = codecs.TakeKeptPushes();
  REQUIRE(kept.size() == sent.size());
  for (size_t i = 0; i < sent.size(); ++i) CHECK(Bytes(kept[i]) == Bytes(sent[i]));
  // The lossless key's push aliases the gradient: the kept one is a copy of it.
  REQUIRE(sent[0].raw.defined());
  CHECK(kept[0].raw.data_ptr() != sent[0].raw.data_ptr());
  CHECK(codecs.TakeKeptPushes().empty());  // taken once; the next call keeps nothing unasked

  // Sent again: the kept pushes come back whatever the gradients, and the error feedback's
  // residual is untouched: the next step's payloads equal the twin's.
  codecs.ResendNext(kept);
  const std::vector<KeyPush> again = codecs.Encode(1, Gradients(7, cpu), 0, kModel.size(), &m);
  REQUIRE(again.size() == kept.size());
  for (size_t i = 0; i < kept.size(); ++i) CHECK(Bytes(again[i]) == Bytes(kept[i]));
  const std::vector<KeyPush> next = codecs.Encode(1, Gradients(1, cpu), 0, kModel.size(), &m);
  const std::vector<KeyPush> expected = twin.Encode(1, Gradients(1, cpu), 0, kModel.size(), &m);
  for (size_t i = 0; i < next.size(); ++i) CHECK(Bytes(next[i]) == Bytes(expected[i]));
  // A resend of the wrong number of keys is refused.
  codecs.ResendNext(std::vector<KeyPush>(kept.begin(), kept.begin() + 1));
  CHECK_THROWS(codecs.Encode(2, Gradients(2, cpu), 0, kModel.size(), &m));
}

}  // namespace
}  // namespace gradpress::worker
