// KeyCodecs (worker/key_codecs.h) on every device the build has: a call's payloads equal what
// each key's codec writes on its own for the same floats, over steps (error feedback carries
// state), and a pulled payload decodes into a host or CUDA tensor to the codec's floats. On a
// CUDA build with a GPU the gradients are CUDA tensors: the large key takes the device codec,
// the others one batch of copies to pinned memory (CopyToHost), and decodes copy up without a
// wait (CopyFromHost); without a GPU only the host half runs.
#include "worker/key_codecs.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "compressors/registry.h"
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

}  // namespace
}  // namespace gradpress::worker
