#include "worker/models/vgg.h"

#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/pooling.h>

#include <vector>

#include "common/error.h"

namespace gradpress::worker::models {
namespace {
constexpr int64_t kMaxPool = -1;
const std::vector<int64_t> kVgg11Config = {
    64, kMaxPool, 128, kMaxPool, 256, 256, kMaxPool, 512, 512, kMaxPool, 512, 512, kMaxPool};
}  // namespace

Vgg11Impl::Vgg11Impl(int64_t in_channels, int64_t image_size, int64_t classes) : Net("vgg11") {
  GP_ENFORCE(in_channels == 1 || in_channels == 3, "vgg11: in_channels must be 1 or 3, got ",
             in_channels);
  GP_ENFORCE(image_size == 32, "vgg11: image_size must be 32 (CIFAR-sized), got ", image_size,
             "; pad 28x28 images to 32");
  GP_ENFORCE(classes >= 1, "vgg11: classes must be >= 1, got ", classes);
  torch::nn::Sequential features;
  int64_t channels = in_channels;
  for (int64_t v : kVgg11Config) {
    if (v == kMaxPool) {
      features->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
      continue;
    }
    features->push_back(torch::nn::Conv2d(torch::nn::Conv2dOptions(channels, v, 3).padding(1)));
    features->push_back(torch::nn::BatchNorm2d(v));
    features->push_back(torch::nn::ReLU(torch::nn::ReLUOptions(/*inplace=*/true)));
    channels = v;
  }
  features_ = register_module("features", features);
  classifier_ = register_module("classifier", torch::nn::Linear(channels, classes));
  KaimingInit(*this);
}

torch::Tensor Vgg11Impl::forward(torch::Tensor x) {
  for (auto& layer : *features_) {
    Gate(*layer.ptr());
    x = layer.forward(x);
  }
  Gate(*classifier_);
  return classifier_(x.flatten(1));
}

}  // namespace gradpress::worker::models
