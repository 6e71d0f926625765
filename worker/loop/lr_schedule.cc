#include "worker/loop/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace gradpress::worker {

double ScheduledLr(const TrainConfig& t, double epoch) {
  if (t.warmup_epochs > 0 && epoch < t.warmup_epochs) return t.lr * epoch / t.warmup_epochs;
  if (t.lr_schedule == "none") return t.lr;
  if (t.lr_schedule == "step") {
    GP_ENFORCE(t.lr_step_epochs >= 1,
               "train.lr_step_epochs must be >= 1 for lr_schedule step, got ", t.lr_step_epochs);
    return t.lr * std::pow(t.lr_gamma, std::floor(epoch / t.lr_step_epochs));
  }
  if (t.lr_schedule == "cosine") {
    const double span = t.epochs - std::max(0.0, t.warmup_epochs);
    if (span <= 0) return t.lr;
    const double x = std::clamp((epoch - std::max(0.0, t.warmup_epochs)) / span, 0.0, 1.0);
    return t.lr * 0.5 * (1 + std::cos(M_PI * x));
  }
  GP_ENFORCE(false, "train.lr_schedule: '", t.lr_schedule, "' is not one of none, step, cosine");
  return 0;
}

}  // namespace gradpress::worker
