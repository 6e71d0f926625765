#pragma once
// DGC's momentum correction per element (compressors/momentum_correction.h), shared by the
// device codec (momentum_correction.cu) and its host twin (tests/compressors/cuda/
// momentum_logic_test.cc). Every float expression is momentum_correction.cc's, in its order, so
// u and v stay the CPU's bit for bit. Thread-safety: pure functions.
#include "compressors/cuda/device_logic.h"

namespace gradpress::compressors::cuda {

// Before the encode: u = m u + g (the momentum, accumulated locally), v = v + u.
GP_HD void MomentumAccumulate(float m, float g, float* u, float* v) {
  *u = m * *u + g;
  *v += *u;
}

// After it, with s the decoded payload at this element: the sent part leaves v, and a sent
// element (s != 0) stops carrying momentum.
GP_HD void MomentumSent(float s, float* u, float* v) {
  *v -= s;
  if (s != 0.f) *u = 0.f;
}

}  // namespace gradpress::compressors::cuda
