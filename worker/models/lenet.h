#pragma once
// LeNet-5 (LeCun et al. 1998) as commonly used today: ReLU and 2x2 max pooling instead of the
// original tanh/subsampling, a plain 84 -> classes output layer instead of the RBF units.
//
//   conv1  in_channels -> 6, 5x5 (padding 2 when the input is 28x28, so the rest is as for
//          32x32)          -> ReLU -> maxpool 2      [6, 14, 14]
//   conv2  6 -> 16, 5x5     -> ReLU -> maxpool 2      [16, 5, 5]
//   fc1    400 -> 120 -> ReLU, fc2 120 -> 84 -> ReLU, fc3 84 -> classes
//
// Parameters (PS keys conv1.weight, conv1.bias, conv2.*, fc1.*, fc2.*, fc3.*), classes = 10:
//   1x28x28: 156 + 2,416 + 48,120 + 10,164 + 850 = 61,706  (241.0 KiB float32)
//   3x32x32: 456 + 2,416 + 48,120 + 10,164 + 850 = 62,006
// No BatchNorm, so no buffers. Default LibTorch init (seed with torch::manual_seed).
//
//   LeNet net(/*in_channels=*/1, /*image_size=*/28, /*classes=*/10);
//   torch::Tensor logits = net(x);  // x [N, 1, 28, 28] -> [N, 10]
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include "worker/models/net.h"

namespace gradpress::worker::models {

class LeNetImpl : public Net {
 public:
  // in_channels 1 or 3, image_size 28 or 32, classes >= 1; else InvalidArgument.
  LeNetImpl(int64_t in_channels = 1, int64_t image_size = 28, int64_t classes = 10);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};
TORCH_MODULE(LeNet);

}  // namespace gradpress::worker::models
