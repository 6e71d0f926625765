#pragma once
// Builds a model by its config name (`model:` in the experiment YAML).
//
//   torch::manual_seed(cfg.train.seed);  // the caller seeds: init is then deterministic
//   std::shared_ptr<Net> net = MakeModel("resnet20", /*in_channels=*/3, /*image_size=*/32,
//                                        /*classes=*/10);
//   spdlog::info("{}", Describe(*net));  // net.h
//
// Names and accepted inputs (in_channels 1 or 3 everywhere, classes >= 1):
//   lenet     image_size 28 or 32   LeNet-5                        (lenet.h)   61,706 @1x28x28
//   vgg11     image_size 32         VGG11-BN, CIFAR classifier     (vgg.h)     9,231,114
//   resnet18  image_size 28 or 32   ResNet-18 CIFAR, option B      (resnet.h)  11,173,962
//   resnet20  image_size 28 or 32   ResNet-20 He et al., option A  (resnet.h)  269,722
// (counts for 10 classes, 3x32x32 unless noted). An unknown name throws InvalidArgument listing
// the known ones; an unsupported in_channels / image_size / classes throws InvalidArgument.
// MakeJobModel is the job's `model:`: "torchscript" loads `path` (torchscript.h), any other
// name is MakeModel's. It seeds LibTorch's global generator with `seed` and builds under a
// process-wide lock: two workers (or a worker and its compress.auto calibration) building
// models on two threads of one process cannot interleave their draws.
// Thread-safety: MakeModel is a pure function of the global generator; MakeJobModel is safe.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/models/net.h"

namespace gradpress::worker::models {

std::shared_ptr<Net> MakeModel(const std::string& name, int64_t in_channels, int64_t image_size,
                               int64_t classes);

std::shared_ptr<Net> MakeJobModel(const std::string& name, const std::string& path,
                                  int64_t in_channels, int64_t image_size, int64_t classes,
                                  uint64_t seed);

// {"lenet", "vgg11", "resnet18", "resnet20"}
const std::vector<std::string>& KnownModels();

}  // namespace gradpress::worker::models
