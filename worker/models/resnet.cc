#include "worker/models/resnet.h"

#include "common/error.h"

namespace gradpress::worker::models {
namespace {

torch::nn::Conv2d Conv3x3(int64_t in, int64_t out, int64_t stride) {
  return torch::nn::Conv2d(
      torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false));
}

}  // namespace

BasicBlockImpl::BasicBlockImpl(int64_t in_channels, int64_t out_channels, int64_t stride,
                               Shortcut shortcut)
    : stride_(stride) {
  conv1_ = register_module("conv1", Conv3x3(in_channels, out_channels, stride));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(out_channels));
  conv2_ = register_module("conv2", Conv3x3(out_channels, out_channels, 1));
  bn2_ = register_module("bn2", torch::nn::BatchNorm2d(out_channels));
  if (stride == 1 && in_channels == out_channels) return;  // identity
  if (shortcut == Shortcut::kProjection) {
    projection_ = register_module(
        "shortcut",
        torch::nn::Sequential(
            torch::nn::Conv2d(
                torch::nn::Conv2dOptions(in_channels, out_channels, 1).stride(stride).bias(false)),
            torch::nn::BatchNorm2d(out_channels)));
  } else {
    GP_ENFORCE(out_channels >= in_channels, "option A shortcut cannot drop channels (", in_channels,
               " -> ", out_channels, ")");
    pad_before_ = (out_channels - in_channels) / 2;
    pad_after_ = out_channels - in_channels - pad_before_;
  }
}

torch::Tensor BasicBlockImpl::forward(torch::Tensor x) {
  torch::Tensor out = torch::relu(bn1_(conv1_(x)));
  out = bn2_(conv2_(out));
  torch::Tensor skip = x;
  if (!projection_.is_empty()) {
    skip = projection_->forward(x);
  } else if (stride_ != 1 || pad_before_ + pad_after_ > 0) {
    if (stride_ != 1) {
      skip = skip.slice(2, 0, c10::nullopt, stride_).slice(3, 0, c10::nullopt, stride_);
    }
    // Pad dims are given last dim first: W, H, then C.
    skip = torch::constant_pad_nd(skip, {0, 0, 0, 0, pad_before_, pad_after_}, 0.0);
  }
  return torch::relu(out + skip);
}

ResNetSpec ResNet18Spec() {
  return {"resnet18", 64, {64, 128, 256, 512}, {2, 2, 2, 2}, Shortcut::kProjection};
}

ResNetSpec ResNet20Spec() { return {"resnet20", 16, {16, 32, 64}, {3, 3, 3}, Shortcut::kZeroPad}; }
ResNetSpec ResNet8Spec() { return {"resnet8", 16, {16, 32, 64}, {1, 1, 1}, Shortcut::kZeroPad}; }

ResNetImpl::ResNetImpl(const ResNetSpec& spec, int64_t in_channels, int64_t image_size,
                       int64_t classes)
    : Net(spec.name) {
  GP_ENFORCE(in_channels == 1 || in_channels == 3, spec.name, ": in_channels must be 1 or 3, got ",
             in_channels);
  GP_ENFORCE(image_size == 28 || image_size == 32, spec.name, ": image_size must be 28 or 32, got ",
             image_size);
  GP_ENFORCE(classes >= 1, spec.name, ": classes must be >= 1, got ", classes);
  GP_ENFORCE(!spec.widths.empty() && spec.widths.size() == spec.blocks.size(), spec.name,
             ": widths and blocks must be non-empty and of equal length");
  conv1_ = register_module("conv1", Conv3x3(in_channels, spec.stem_channels, 1));
  bn1_ = register_module("bn1", torch::nn::BatchNorm2d(spec.stem_channels));
  int64_t channels = spec.stem_channels;
  for (size_t stage = 0; stage < spec.widths.size(); ++stage) {
    torch::nn::Sequential layer;
    for (int64_t b = 0; b < spec.blocks[stage]; ++b) {
      const int64_t stride = (stage > 0 && b == 0) ? 2 : 1;
      layer->push_back(BasicBlock(channels, spec.widths[stage], stride, spec.shortcut));
      channels = spec.widths[stage];
    }
    layers_.push_back(register_module("layer" + std::to_string(stage + 1), layer));
  }
  linear_ = register_module("linear", torch::nn::Linear(channels, classes));
  KaimingInit(*this);
}

torch::Tensor ResNetImpl::forward(torch::Tensor x) {
  Gate(*conv1_);
  Gate(*bn1_);
  x = torch::relu(bn1_(conv1_(x)));
  for (auto& layer : layers_) {
    for (auto& block : *layer) {
      Gate(*block.ptr());
      x = block.forward(x);
    }
  }
  x = torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1);
  Gate(*linear_);
  return linear_(x);
}

}  // namespace gradpress::worker::models
