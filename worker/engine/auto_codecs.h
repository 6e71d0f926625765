#pragma once
// compress.auto (Espresso's idea, docs/planner.md): each key's push codec chosen among none,
// fp16 and the configured push codec, whichever the step model (step_model.h) predicts the
// shortest step with on the configured link (compress.link_gbps, link_latency_ms, topology,
// cluster.workers, the shards, sync.overlap), from a calibration of this worker's model and
// codecs (calibration.h). The pull stays the server's codec (config `pull`) for every key.
//
//   KeyCalibration cal;
//   AutoChoice a = ChooseKeyCodecs(config, AutoCluster(config), /*steps=*/3, &cal);
//   codecs->SetKeyPushCodecs(a.push);  for (auto& line : a.Describe(cal)) log(line);
//
// The choice: from the fastest uniform one (every key under one candidate), keys move one at
// a time to another candidate while the predicted step shortens. A more faithful uniform
// choice (none, then fp16) whose step is within kAutoTie of that wins instead: compression
// that saves less is not worth its accuracy, and the calibration cannot tell it apart. Keys
// are never moved to a more faithful codec one by one on the model's word that their
// transfer hides behind backward: on CPU workers it does not (the bytes' CPU competes with
// the compute; measured in docs/planner.md).
// Thread-safety: pure functions, except ChooseKeyCodecs (calibration.h's).
#include <string>
#include <vector>

#include "common/codec_spec.h"
#include "common/config.h"
#include "worker/engine/calibration.h"
#include "worker/engine/step_model.h"

namespace gradpress::worker {

// A predicted step within this share of the shortest is a tie: about the calibration's noise
// on a busy machine (two workers' calibrations of one model differ by 1-2%).
constexpr double kAutoTie = 0.01;

struct AutoChoice {
  std::vector<CalibrationMethod> candidates;  // none, fp16, the configured push codec
  std::vector<int> method;                    // per key: the index of its candidate
  std::vector<CodecSpec> push;                // per key: that candidate's push codec
  double step_ms = 0;                         // predicted with the choice
  std::vector<double> uniform_ms;             // predicted with every key under each candidate
  // One line per key ("conv1.weight: topk ... (1.2 MB, ready at 40.1 ms)") and a summary.
  std::vector<std::string> Describe(const KeyCalibration& k) const;
};

// The cluster the choice is made for, from the config.
Cluster AutoCluster(const Config& c);

// Per key, the index of a calibrated method (k.cost's order, most faithful first; see above).
std::vector<int> ChooseMethods(const KeyCalibration& k, const Cluster& cluster);

// Calibrates this worker's model on none, fp16 and config.push (pull: config.pull) over
// `steps` steps and chooses for `cluster` (gradpress-plan --auto: any cluster; the Trainer:
// AutoCluster(config)).
AutoChoice ChooseKeyCodecs(const Config& config, const Cluster& cluster, int steps,
                           KeyCalibration* calibration);

}  // namespace gradpress::worker
