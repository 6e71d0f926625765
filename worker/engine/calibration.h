#pragma once
// Calibration of the step model (step_model.h) on this machine, key by key: the job's model
// (config `model`, a TorchScript file included) trains a few batches of its dataset as one
// worker would, and for every key and every method (a push and a pull codec) it measures the
// push codec's encode on the real gradients (error feedback included) and the bytes it makes,
// the server's decode of that push and its pull encode of the result, and the worker's
// decode of the pull; and, once for all methods, when backward produced each key's gradient,
// forward, backward and the optimizer. Keys under compress.min_numel (and 1-D ones with
// skip_1d) travel uncompressed, as in a run. Medians over `steps` steps after a warm-up step.
// gradpress-plan (plan/calibration.h) and compress.auto (auto_codecs.h) both start here.
//
//   KeyCalibration k = CalibrateKeys(config, {{"none", {}, {}}, {"m5", push, pull}}, 5);
//   Calibration m5 = Assemble(k, std::vector<int>(k.keys(), 1), "m5");   // buckets
//
// Throws InvalidArgument for a config the worker would refuse or a bad codec.
// Thread-safety: one call at a time (it sets torch's thread count and seeds its generator).
#include <cstdint>
#include <string>
#include <vector>

#include "common/codec_spec.h"
#include "common/config.h"
#include "worker/engine/step_model.h"

namespace gradpress::worker {

// A method calibrated: the codecs of push and pull (a key that travels uncompressed uses none).
struct CalibrationMethod {
  std::string label;
  CodecSpec push, pull;
};

// One key under one method, on one worker (ms, bytes).
struct KeyCost {
  double encode_ms = 0, decode_ms = 0, push_ms = 0, finalize_ms = 0;
  int64_t bytes_up = 0, bytes_down = 0, dense_bytes = 0;
};

struct KeyCalibration {
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  std::vector<std::string> names;          // the model's keys, in model order
  std::vector<double> ready_ms;            // per key: since backward started
  std::vector<bool> compressed;            // per key: travels compressed (else none always)
  std::vector<int> split;                  // keys per bucket, model order (BucketScheduler)
  std::vector<std::vector<KeyCost>> cost;  // [method][key]
  size_t keys() const { return ready_ms.size(); }
  // Key i travels compressed (every key when `compressed` was not filled in).
  bool Compressed(size_t i) const { return compressed.empty() || compressed[i]; }
};

KeyCalibration CalibrateKeys(const Config& config, const std::vector<CalibrationMethod>& methods,
                             int steps);

// The buckets of the pipelined step, in backward order, with key i under method choice[i]:
// costs and bytes summed over a bucket's keys, ready when its last key is.
Calibration Assemble(const KeyCalibration& k, const std::vector<int>& choice,
                     const std::string& label);

}  // namespace gradpress::worker
