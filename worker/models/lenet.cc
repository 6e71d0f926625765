#include "worker/models/lenet.h"

#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/pooling.h>

#include "common/error.h"

namespace gradpress::worker::models {

namespace F = torch::nn::functional;

LeNetImpl::LeNetImpl(int64_t in_channels, int64_t image_size, int64_t classes) : Net("lenet") {
  GP_ENFORCE(in_channels == 1 || in_channels == 3, "lenet: in_channels must be 1 or 3, got ",
             in_channels);
  GP_ENFORCE(image_size == 28 || image_size == 32, "lenet: image_size must be 28 or 32, got ",
             image_size);
  GP_ENFORCE(classes >= 1, "lenet: classes must be >= 1, got ", classes);
  const int64_t padding = image_size == 28 ? 2 : 0;
  conv1_ = register_module(
      "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, 6, 5).padding(padding)));
  conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(6, 16, 5)));
  fc1_ = register_module("fc1", torch::nn::Linear(16 * 5 * 5, 120));
  fc2_ = register_module("fc2", torch::nn::Linear(120, 84));
  fc3_ = register_module("fc3", torch::nn::Linear(84, classes));
}

torch::Tensor LeNetImpl::forward(torch::Tensor x) {
  Gate(*conv1_);
  x = F::max_pool2d(torch::relu(conv1_(x)), F::MaxPool2dFuncOptions(2));
  Gate(*conv2_);
  x = F::max_pool2d(torch::relu(conv2_(x)), F::MaxPool2dFuncOptions(2));
  x = x.flatten(1);
  Gate(*fc1_);
  x = torch::relu(fc1_(x));
  Gate(*fc2_);
  x = torch::relu(fc2_(x));
  Gate(*fc3_);
  return fc3_(x);
}

}  // namespace gradpress::worker::models
