#pragma once
// SGD with momentum, weight decay and Nesterov, with PyTorch's torch.optim.SGD semantics
// (dampening 0), on float32 host memory. The server steps it for exchange=weights.
//
//   d = g + weight_decay * w
//   buf = d on the first step, else momentum * buf + d          (when momentum != 0)
//   d = d + momentum * buf (nesterov)  or  d = buf
//   w = w - lr * d
//
//   SgdState st;  SgdStep(opts, w, g, n, &st);
// Thread-safety: one state per key; distinct keys may step concurrently.
#include <cstdint>
#include <vector>

namespace gradpress::server {

struct SgdOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

struct SgdState {
  std::vector<float> momentum_buffer;  // empty until the first step with momentum
};

void SgdStep(const SgdOptions& opts, float* weights, const float* grad, int64_t n, SgdState* state);
// The same step for the gradient that is `values` at the strictly increasing `indices` (< n)
// and +0.0 elsewhere (a sparse payload's decode), bit for bit SgdStep on that dense gradient
// without forming it.
void SgdStepSparse(const SgdOptions& opts, float* weights, const std::vector<int32_t>& indices,
                   const std::vector<float>& values, int64_t n, SgdState* state);

}  // namespace gradpress::server
