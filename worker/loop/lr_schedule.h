#pragma once
// The learning rate of a training step from the config's schedule (common/config.h, train.*).
//
//   double lr = ScheduledLr(config.train, /*epoch=*/step / double(steps_per_epoch));
//
// epoch is fractional (steps done / steps per epoch). With warmup_epochs > 0 the rate rises
// linearly from 0 to train.lr over the first warmup_epochs, then follows the schedule:
//   none    train.lr
//   step    train.lr * lr_gamma ^ floor(epoch / lr_step_epochs)
//   cosine  train.lr * (1 + cos(pi * (epoch - warmup) / (epochs - warmup))) / 2
// Throws InvalidArgument for an unknown schedule or a step schedule with lr_step_epochs < 1.
// Thread-safety: pure function.
#include "common/config.h"

namespace gradpress::worker {

double ScheduledLr(const TrainConfig& train, double epoch);

}  // namespace gradpress::worker
