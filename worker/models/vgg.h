#pragma once
// VGG11 with BatchNorm (Simonyan & Zisserman 2015, configuration "A", BN after every conv) for
// 32x32 inputs, as in the common CIFAR implementations (e.g. kuangliu/pytorch-cifar):
//
//   features: cfg [64, M, 128, M, 256, 256, M, 512, 512, M, 512, 512, M], each number a
//             3x3 conv (padding 1) -> BatchNorm2d -> ReLU, each M a 2x2 max pool; 32 -> 1
//   classifier: Linear 512 -> classes (no 4096-wide layers)
//
// Parameters, classes = 10, 3x32x32: convs 9,220,480 + BatchNorm gamma/beta 5,504 + classifier
// 5,130 = 9,231,114 (35.2 MiB float32). Buffers: 8 BatchNorms x (mean, var, count) = 24 tensors.
// PS keys follow PyTorch's names: features.0.weight, features.1.weight (BN gamma), ...,
// classifier.weight. Init: KaimingInit (net.h). See net.h for how BN statistics are treated.
//
//   Vgg11 net(/*in_channels=*/3, /*image_size=*/32, /*classes=*/10);
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "worker/models/net.h"

namespace gradpress::worker::models {

class Vgg11Impl : public Net {
 public:
  // in_channels 1 or 3, image_size 32 (five halvings down to 1x1), classes >= 1.
  Vgg11Impl(int64_t in_channels = 3, int64_t image_size = 32, int64_t classes = 10);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Sequential features_{nullptr};
  torch::nn::Linear classifier_{nullptr};
};
TORCH_MODULE(Vgg11);

}  // namespace gradpress::worker::models
