#include "worker/models/model_factory.h"

#include <torch/torch.h>

#include <mutex>

#include "common/error.h"
#include "worker/models/lenet.h"
#include "worker/models/resnet.h"
#include "worker/models/torchscript.h"
#include "worker/models/vgg.h"

namespace gradpress::worker::models {

const std::vector<std::string>& KnownModels() {
  static const std::vector<std::string> kNames = {"lenet", "vgg11", "resnet18", "resnet20",
                                                  "resnet8"};
  return kNames;
}

std::shared_ptr<Net> MakeModel(const std::string& name, int64_t in_channels, int64_t image_size,
                               int64_t classes) {
  if (name == "lenet") return LeNet(in_channels, image_size, classes).ptr();
  if (name == "vgg11") return Vgg11(in_channels, image_size, classes).ptr();
  if (name == "resnet18") return ResNet(ResNet18Spec(), in_channels, image_size, classes).ptr();
  if (name == "resnet20") return ResNet(ResNet20Spec(), in_channels, image_size, classes).ptr();
  if (name == "resnet8") return ResNet(ResNet8Spec(), in_channels, image_size, classes).ptr();
  std::string known;
  for (const auto& n : KnownModels()) known += (known.empty() ? "" : ", ") + n;
  GP_ENFORCE(false, "unknown model '", name, "'; known models: ", known);
  return nullptr;  // unreachable
}

std::shared_ptr<Net> MakeJobModel(const std::string& name, const std::string& path,
                                  int64_t in_channels, int64_t image_size, int64_t classes,
                                  uint64_t seed) {
  static std::mutex seed_mu;  // the global generator: seeded and drawn by one thread at a time
  std::lock_guard<std::mutex> lock(seed_mu);
  torch::manual_seed(seed);  // a loaded model's later draws (dropout) start from it too
  return name == "torchscript" ? LoadTorchScript(path, in_channels, image_size, classes)
                               : MakeModel(name, in_channels, image_size, classes);
}

}  // namespace gradpress::worker::models
