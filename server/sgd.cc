#include "server/sgd.h"

namespace gradpress::server {

void SgdStep(const SgdOptions& opts, float* w, const float* g, int64_t n, SgdState* state) {
  const auto lr = static_cast<float>(opts.lr), mu = static_cast<float>(opts.momentum),
             wd = static_cast<float>(opts.weight_decay);
  if (mu == 0.f) {
    for (int64_t i = 0; i < n; ++i) w[i] -= lr * (g[i] + wd * w[i]);
    return;
  }
  std::vector<float>& buf = state->momentum_buffer;
  const bool first = buf.empty();
  if (first) buf.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    const float d = g[i] + wd * w[i];
    buf[i] = first ? d : mu * buf[i] + d;
    w[i] -= lr * (opts.nesterov ? d + mu * buf[i] : buf[i]);
  }
}

}  // namespace gradpress::server
