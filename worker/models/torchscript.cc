// A TorchScript module as a Net (torchscript.h).
#include "worker/models/torchscript.h"

#include <torch/script.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/error.h"

namespace gradpress::worker::models {
namespace {

std::string KeyName(std::string name) {
  for (char& c : name)
    if (c == '.') c = '_';
  return name;
}

const char* const kHowToExport =
    "export the model in training mode with torch.jit.script(model).save(path) (not "
    "torch.jit.freeze or torch.jit.optimize_for_inference, which fold the parameters into "
    "constants)";

class ScriptNet : public Net {
 public:
  ScriptNet(torch::jit::Module module, const std::string& path)
      : Net("torchscript"), module_(std::move(module)) {
    module_.train();
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      GP_ENFORCE(p.value.is_floating_point(), "model.path ", path, ": parameter '", p.name,
                 "' is not floating point");
      torch::Tensor t = p.value;
      t.set_requires_grad(true);
      register_parameter(KeyName(p.name), t);
    }
    for (const auto& b : module_.named_buffers(/*recurse=*/true))
      register_buffer(KeyName(b.name), b.value);
    GP_ENFORCE(!parameters().empty(), "model.path ", path,
               ": the TorchScript module has no trainable parameters; ", kHowToExport);
  }
  torch::Tensor forward(torch::Tensor x) override {
    Gate(*this);  // one gate: every parameter is this module's
    return module_.forward({x}).toTensor();
  }
  void train(bool on = true) override {
    Net::train(on);
    module_.train(on);
  }

 private:
  torch::jit::Module module_;
};

}  // namespace

std::shared_ptr<Net> LoadTorchScript(const std::string& path, int64_t in_channels,
                                     int64_t image_size, int64_t classes) {
  torch::jit::Module module;
  try {
    module = torch::jit::load(path);
  } catch (const c10::Error& e) {
    throw InvalidArgument("model.path " + path + ": not a TorchScript module (" +
                          e.what_without_backtrace() + "); " + kHowToExport);
  }
  auto net = std::make_shared<ScriptNet>(std::move(module), path);
  torch::Tensor out;
  {
    torch::NoGradGuard no_grad;
    net->eval();  // BatchNorm statistics stay as loaded
    try {
      out = net->forward(torch::zeros({2, in_channels, image_size, image_size}));
    } catch (const c10::Error& e) {
      net->train();
      throw InvalidArgument("model.path " + path + ": forward of a [2, " +
                            std::to_string(in_channels) + ", " + std::to_string(image_size) + ", " +
                            std::to_string(image_size) +
                            "] batch failed: " + e.what_without_backtrace());
    }
    net->train();
  }
  GP_ENFORCE(out.dim() == 2 && out.size(0) == 2 && out.size(1) == classes, "model.path ", path,
             ": the model's output for a [2, ", in_channels, ", ", image_size, ", ", image_size,
             "] batch has shape [", out.sizes(), "]; the dataset needs logits [N, ", classes,
             "] (one per class)");
  return net;
}

}  // namespace gradpress::worker::models
