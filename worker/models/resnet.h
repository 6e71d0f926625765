#pragma once
// CIFAR-style residual networks built from BasicBlocks (two 3x3 convs, each followed by
// BatchNorm; ReLU after the first and after the sum). Convs have no bias; init is KaimingInit.
//
// ResNet-18, CIFAR variant (kuangliu/pytorch-cifar): 3x3 stem conv 64 + BN, no max pool,
//   stages 64/128/256/512 x [2, 2, 2, 2] blocks, strides 1/2/2/2, option B shortcuts (1x1 conv
//   stride s + BN) where the shape changes, global average pool, Linear 512 -> classes.
//   3x32x32, 10 classes: 11,173,962 parameters (42.6 MiB float32).
// ResNet-20 (He et al. 2016, section 4.2): 3x3 stem conv 16 + BN, stages 16/32/64 x 3 blocks,
//   strides 1/2/2, option A shortcuts (identity; where the shape changes, subsample by 2 and
//   zero-pad the new channels: parameter-free, as in the paper's CIFAR experiments), global
//   average pool, Linear 64 -> classes.
//   3x32x32, 10 classes: 464 + 3x4,672 + (13,952 + 2x18,560) + (55,552 + 2x73,984) + 650
//   = 269,722 parameters (1.0 MiB float32).
// ResNet-8: ResNet-20 with one block per stage (6n + 2 layers, n = 1): 75,290 parameters at
//   3x32x32, 75,002 at 1x28x28; a quick CNN for Fashion-MNIST (scripts/compare.sh).
//
// PS keys follow PyTorch's names: conv1.weight, bn1.weight, layer1.0.conv1.weight, ...,
// layer2.0.shortcut.0.weight (option B only), linear.weight. BN buffers: see net.h.
//
//   ResNet net(ResNet20Spec(), /*in_channels=*/3, /*image_size=*/32, /*classes=*/10);
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <string>
#include <vector>

#include "worker/models/net.h"

namespace gradpress::worker::models {

// How a BasicBlock adds its input when the shape changes (He et al. 2016, section 3.3).
enum class Shortcut {
  kZeroPad,     // option A: x[:, :, ::s, ::s] with zero channels appended; no parameters
  kProjection,  // option B: 1x1 conv stride s (no bias) + BatchNorm
};

class BasicBlockImpl : public torch::nn::Module {
 public:
  BasicBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride, Shortcut shortcut);
  torch::Tensor forward(torch::Tensor x);

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  torch::nn::Sequential projection_{nullptr};  // option B with a shape change only
  int64_t stride_;
  int64_t pad_before_ = 0, pad_after_ = 0;  // option A: zero channels around the input's
};
TORCH_MODULE(BasicBlock);

struct ResNetSpec {
  std::string name;             // Module::name(), e.g. "resnet20"
  int64_t stem_channels;        // output of the 3x3 stem conv
  std::vector<int64_t> widths;  // output channels per stage; stage i > 0 has stride 2
  std::vector<int64_t> blocks;  // BasicBlocks per stage
  Shortcut shortcut;
};
ResNetSpec ResNet18Spec();  // "resnet18": 64, {64,128,256,512}, {2,2,2,2}, kProjection
ResNetSpec ResNet20Spec();  // "resnet20": 16, {16,32,64}, {3,3,3}, kZeroPad
ResNetSpec ResNet8Spec();   // "resnet8": 16, {16,32,64}, {1,1,1}, kZeroPad (He et al.'s n = 1)

class ResNetImpl : public Net {
 public:
  // in_channels 1 or 3, image_size 28 or 32 (the global pool makes both work), classes >= 1.
  ResNetImpl(const ResNetSpec& spec, int64_t in_channels = 3, int64_t image_size = 32,
             int64_t classes = 10);
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Conv2d conv1_{nullptr};
  torch::nn::BatchNorm2d bn1_{nullptr};
  std::vector<torch::nn::Sequential> layers_;  // registered as layer1, layer2, ...
  torch::nn::Linear linear_{nullptr};
};
TORCH_MODULE(ResNet);

}  // namespace gradpress::worker::models
