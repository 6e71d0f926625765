#include "server/sgd.h"

#include <cstddef>

namespace gradpress::server {
namespace {

struct Coeffs {
  float lr, mu, wd;
  bool nesterov;
};

// The step on w[begin, end) with the gradient g(i): the one copy of the arithmetic. buf null:
// no momentum; first: the buffer starts as d. The branches are template arguments so that
// each loop is straight-line (and vectorised) code.
template <bool kMomentum, bool kFirst, bool kNesterov, typename Grad>
inline void StepLoop(const Coeffs& c, float* w, float* buf, int64_t begin, int64_t end, Grad g) {
  for (int64_t i = begin; i < end; ++i) {
    if constexpr (!kMomentum) {
      w[i] -= c.lr * (g(i) + c.wd * w[i]);
    } else {
      const float d = g(i) + c.wd * w[i];
      buf[i] = kFirst ? d : c.mu * buf[i] + d;
      w[i] -= c.lr * (kNesterov ? d + c.mu * buf[i] : buf[i]);
    }
  }
}

template <typename Grad>
inline void StepRange(const Coeffs& c, float* w, float* buf, bool first, int64_t begin, int64_t end,
                      Grad g) {
  if (buf == nullptr) return StepLoop<false, false, false>(c, w, buf, begin, end, g);
  if (first)
    return c.nesterov ? StepLoop<true, true, true>(c, w, buf, begin, end, g)
                      : StepLoop<true, true, false>(c, w, buf, begin, end, g);
  return c.nesterov ? StepLoop<true, false, true>(c, w, buf, begin, end, g)
                    : StepLoop<true, false, false>(c, w, buf, begin, end, g);
}

// The coefficients, and the momentum buffer (null without momentum; sized on the first step,
// which *first then reports).
float* Prepare(const SgdOptions& opts, int64_t n, SgdState* state, Coeffs* c, bool* first) {
  *c = {static_cast<float>(opts.lr), static_cast<float>(opts.momentum),
        static_cast<float>(opts.weight_decay), opts.nesterov};
  *first = false;
  if (c->mu == 0.f) return nullptr;
  std::vector<float>& buf = state->momentum_buffer;
  *first = buf.empty();
  if (*first) buf.resize(n);
  return buf.data();
}

}  // namespace

void SgdStep(const SgdOptions& opts, float* w, const float* g, int64_t n, SgdState* state) {
  Coeffs c;
  bool first;
  float* buf = Prepare(opts, n, state, &c, &first);
  StepRange(c, w, buf, first, 0, n, [g](int64_t i) { return g[i]; });
}

void SgdStepSparse(const SgdOptions& opts, float* w, const std::vector<int32_t>& indices,
                   const std::vector<float>& values, int64_t n, SgdState* state) {
  Coeffs c;
  bool first;
  float* buf = Prepare(opts, n, state, &c, &first);
  const auto zero = [](int64_t) { return 0.f; };  // +0.0, as the dense decode holds
  int64_t at = 0;
  for (size_t j = 0; j < indices.size(); ++j) {
    const int64_t i = indices[j];
    StepRange(c, w, buf, first, at, i, zero);
    const float v = values[j];
    StepRange(c, w, buf, first, i, i + 1, [v](int64_t) { return v; });
    at = i + 1;
  }
  StepRange(c, w, buf, first, at, n, zero);
}

}  // namespace gradpress::server
