#include "worker/models/net.h"

#include <torch/nn/init.h>
#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/conv.h>

#include <cstdio>

namespace gradpress::worker::models {
namespace {

// 61706 -> "61,706".
std::string WithThousands(int64_t n) {
  std::string digits = std::to_string(n < 0 ? -n : n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return n < 0 ? "-" + out : out;
}

std::string HumanBytes(int64_t bytes) {
  char buf[32];
  if (bytes < 1024) {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(bytes));
  } else if (bytes < 1024 * 1024) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", bytes / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / (1024.0 * 1024.0));
  }
  return buf;
}

}  // namespace

ModelInfo Inspect(const torch::nn::Module& module) {
  ModelInfo info;
  for (const auto& p : module.parameters()) {
    info.parameters += p.numel();
    ++info.tensors;
  }
  info.bytes = info.parameters * static_cast<int64_t>(sizeof(float));
  for (const auto& b : module.buffers()) {
    info.buffer_elements += b.numel();
    ++info.buffer_tensors;
  }
  return info;
}

std::string Describe(const torch::nn::Module& module) {
  ModelInfo info = Inspect(module);
  std::string out = module.name() + ": " + WithThousands(info.parameters) + " parameters (" +
                    HumanBytes(info.bytes) + " float32)";
  if (info.buffer_tensors > 0) {
    out += "; " + WithThousands(info.buffer_elements) + " buffer elements in " +
           WithThousands(info.buffer_tensors) + " tensors (BatchNorm running statistics, local)";
  }
  return out;
}

std::vector<std::string> ParameterNames(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_parameters()) names.push_back(item.key());
  return names;
}

std::vector<torch::Tensor> BufferTensors(torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors;
  for (const auto& item : module.named_buffers()) tensors.push_back(item.value());
  return tensors;
}

std::vector<std::string> BufferNames(const torch::nn::Module& module) {
  std::vector<std::string> names;
  for (const auto& item : module.named_buffers()) names.push_back(item.key());
  return names;
}

void KaimingInit(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  // Children only: modules(include_self=true) needs shared_from_this, which a constructor
  // calling this does not have yet.
  for (auto& m : module.modules(/*include_self=*/false)) {
    if (auto* conv = m->as<torch::nn::Conv2dImpl>()) {
      torch::nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
      if (conv->bias.defined()) torch::nn::init::zeros_(conv->bias);
    } else if (auto* bn = m->as<torch::nn::BatchNorm2dImpl>()) {
      torch::nn::init::ones_(bn->weight);
      torch::nn::init::zeros_(bn->bias);
    }
  }
}

}  // namespace gradpress::worker::models
