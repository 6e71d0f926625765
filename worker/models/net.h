#pragma once
// The common base of every gradpress model, and what the trainer and the PS need to know
// about a model's tensors.
//
//   torch::manual_seed(42);                                  // init is deterministic by seed
//   std::shared_ptr<Net> net = MakeModel("lenet", 1, 28, 10);  // model_factory.h
//   LOG(INFO) << Describe(*net);  // "lenet: 61,706 parameters (241.0 KiB float32)"
//   torch::Tensor logits = net->forward(images);             // [N, C, H, W] -> [N, classes]
//
// Parameters vs buffers (BatchNorm running statistics are handled deliberately):
// - Parameters (`named_parameters()`, weights and biases, BatchNorm's gamma/beta included) are
//   what the parameter server exchanges. The PS key of a tensor is its parameter name, e.g.
//   "layer1.0.conv1.weight". Names and order are fixed by the constructors (registration order,
//   depth first) and are the same on every construction and every worker, so the fingerprint
//   sent at Register is stable.
// - Buffers (`BufferTensors()`: running_mean, running_var and num_batches_tracked of each
//   BatchNorm, in named_buffers() order) are never pushed as gradients. They stay local to each
//   worker unless the trainer averages them at a sync point (model averaging, method 6's epoch
//   rule, checkpointing). Average only the floating ones: num_batches_tracked is int64 and only
//   used with momentum=None, which no model here uses (momentum 0.1, eps 1e-5).
// - Call train() before training steps and eval() before testing: in eval mode BatchNorm
//   normalises with the running statistics, in train mode with the batch's and updates them.
//
// Thread-safety: a model is not thread-safe; use one per worker thread. The functions below
// only read the module (BufferTensors returns tensors that alias the module's storage).
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace gradpress::worker::models {

// Every model derives from Net, so the trainer holds a std::shared_ptr<Net> without AnyModule.
// Module::name() is the model's registry name ("lenet", "vgg11", "resnet18", "resnet20").
//
// Layer gates (BytePS's cross-barrier, worker/engine/exchange.h): forward calls the gate, if one is
// set, with each layer before the layer reads its parameters, in the order it runs them; every
// parameter belongs to a gated layer. The trainer waits there for that layer's new weights, so
// the next forward starts while later layers' are still in flight.
class Net : public torch::nn::Module {
 public:
  using LayerGate = std::function<void(const torch::nn::Module& layer)>;
  explicit Net(std::string name) : torch::nn::Module(std::move(name)) {}
  // x: float32 [N, in_channels, image_size, image_size]; returns logits [N, classes].
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  // Set (or clear with {}) the gate; not thread-safe with forward.
  void set_layer_gate(LayerGate gate) { gate_ = std::move(gate); }

 protected:
  void Gate(const torch::nn::Module& layer) {
    if (gate_) gate_(layer);
  }

 private:
  LayerGate gate_;
};

struct ModelInfo {
  int64_t parameters = 0;       // trainable elements: what the PS holds and exchanges
  int64_t bytes = 0;            // parameters * 4: their size as float32
  int64_t tensors = 0;          // parameter tensors = PS keys
  int64_t buffer_elements = 0;  // BatchNorm running statistics (local, not exchanged)
  int64_t buffer_tensors = 0;
};

ModelInfo Inspect(const torch::nn::Module& module);

// "lenet: 61,706 parameters (241.0 KiB float32)"; models with BatchNorm add
// "; 1,395 buffer elements in 57 tensors (BatchNorm running statistics, local)" (resnet20).
std::string Describe(const torch::nn::Module& module);

// Parameter names in named_parameters() order: the PS keys.
std::vector<std::string> ParameterNames(const torch::nn::Module& module);

// Buffers (BatchNorm running_mean, running_var, num_batches_tracked) in named_buffers() order,
// a stable order across constructions. The tensors alias the module's: copy_ into them to
// install averaged statistics. Empty for a model without BatchNorm (LeNet).
std::vector<torch::Tensor> BufferTensors(torch::nn::Module& module);
std::vector<std::string> BufferNames(const torch::nn::Module& module);

// Kaiming-normal (fan_out, ReLU) for every Conv2d weight, BatchNorm gamma 1 and beta 0; Linear
// layers keep LibTorch's default. Used by VGG11 and the ResNets (He et al. 2015/2016). Visits
// the submodules of `module`, not `module` itself, so constructors may call it.
void KaimingInit(torch::nn::Module& module);

}  // namespace gradpress::worker::models
