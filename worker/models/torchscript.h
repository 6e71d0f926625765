#pragma once
// A user's model for the C++ daemons: `model: {name: torchscript, path: m.pt}` loads a module
// saved with `torch.jit.script(model).save("m.pt")` (in training mode) and trains it like a
// built-in model: its parameters are the PS keys (the TorchScript names with '.' as '_', in
// named_parameters() order), its buffers (BatchNorm statistics) stay local, checkpoints hold
// both. forward maps [N, C, H, W] to logits [N, classes].
//
//   std::shared_ptr<Net> net = LoadTorchScript("m.pt", /*in_channels=*/1, /*image_size=*/28, 10);
//
// Refused at load, with what was wrong and how to export: a file that does not load, an
// export without trainable parameters (torch.jit.freeze, optimize_for_inference, or saved
// from a model whose parameters do not require grad), and a module whose output for a
// [2, C, H, W] batch is not [2, classes]. The layer gate (cross-barrier) is one gate for the
// whole model: TorchScript runs its layers in one call.
// Thread-safety: as Net.
#include <cstdint>
#include <memory>
#include <string>

#include "worker/models/net.h"

namespace gradpress::worker::models {

std::shared_ptr<Net> LoadTorchScript(const std::string& path, int64_t in_channels,
                                     int64_t image_size, int64_t classes);

}  // namespace gradpress::worker::models
