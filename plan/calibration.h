#pragma once
// gradpress-plan's calibrations: worker/engine/calibration.h's measurement, key by key, assembled
// into the buckets of the pipelined step (worker/engine/bucket_scheduler.h's split of
// sync.bucket_mb), one Calibration per method; and their YAML form.
//
//   std::vector<Calibration> c = Calibrate(config, {"none", "topk ratio=0.01"}, /*steps=*/5);
//
// Each method is a codec shorthand for push and pull ("" keeps the config's codecs); all are
// measured on the same steps' gradients, so they share one compute profile (forward,
// backward, bucket readiness, optimizer). Medians over `steps` steps after one warm-up step.
// Throws InvalidArgument for a config the worker would refuse or a bad codec.
// Thread-safety: one call at a time (it sets torch's thread count).
#include <string>
#include <vector>

#include "common/config.h"
#include "plan/report.h"  // the step model's types, in plan's namespace
#include "worker/engine/calibration.h"

namespace gradpress::plan {

std::vector<Calibration> Calibrate(const Config& config, const std::vector<std::string>& methods,
                                   int steps);

// A calibration as one YAML flow mapping and back (gradpress-plan --save / --calibration).
std::string CalibrationYaml(const Calibration& c);
Calibration CalibrationFromYaml(const std::string& text);

}  // namespace gradpress::plan
