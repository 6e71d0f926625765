#pragma once
// Calibration of the step-time model (plan/step_model.h) on this machine: the job's model
// (config `model`, a TorchScript file included) trains a few batches of its dataset on one
// worker, and each bucket (worker/bucket_scheduler.h's split of sync.bucket_mb) is measured:
// when backward produced its last gradient, how long the push codec takes on its real
// gradients (error feedback included) and how many bytes it makes, the server's share (the
// push's decode, the mean and the pull codec's encode) and the worker's decode of the pull.
// Keys under compress.min_numel (and 1-D ones with skip_1d) travel uncompressed, as in a run.
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
#include "plan/step_model.h"

namespace gradpress::plan {

std::vector<Calibration> Calibrate(const Config& config, const std::vector<std::string>& methods,
                                   int steps);

// A calibration as one YAML flow mapping and back (gradpress-plan --save / --calibration).
std::string CalibrationYaml(const Calibration& c);
Calibration CalibrationFromYaml(const std::string& text);

}  // namespace gradpress::plan
