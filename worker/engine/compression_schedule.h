#pragma once
// How the push codec changes during training.
//
// 1. DGC's sparsity warm-up (Lin et al., "Deep Gradient Compression", ICLR 2018, 3.4):
//    during the first `warmup_epochs` epochs the density grows sparser exponentially,
//      density(e) = max(target, 0.25^(e+1))   -> 25%, 6.25%, 1.5625%, 0.39%, ... then target
//    i.e. the paper's sparsity 75%, 93.75%, 98.4375%, 99.6%, then 99.9% at target 0.001.
//
// 2. Dynamic compression (the dynamic gradient compression seed paper): a controller moves
//    the push codec along a ladder of codecs, fewest bits first (qsgd 4 -> 8 -> 16 bits),
//    by a step function of test accuracy and training loss, evaluated at each epoch's end:
//      gain = acc - previous acc;  drop = (previous loss - loss) / previous loss
//      stalled = gain < acc_threshold and drop < loss_threshold
//      - stalled below the top rung        -> one rung up (more bits)
//      - stalled on the top rung, or `patience` epochs on one rung
//                                          -> no compression for `uncompressed_epochs`
//                                             epochs, then back to the rung it left
//    Each decision carries a reason for the log and metrics.jsonl.
//
// The trainer feeds it the test accuracy and the training loss over the first 4096 training
// images, both the same on every worker, so all workers move together.
//
//   CompressionController ctl(options);  Decision d = ctl.Update(0.81, 0.52);
//   if (d.changed) client.SetPushCodec(d.spec);
//
// Each change is recorded through a PolicyLog (the loop's run files implement it).
//
// Thread-safety: values; one thread.
#include <cstdint>
#include <string>
#include <vector>

#include "common/config.h"

namespace gradpress::worker {

// Density of epoch `epoch` (0-based) under DGC's warm-up; target when warmup_epochs is 0.
double WarmupDensity(double target, int warmup_epochs, int64_t epoch);

// "a | b | c" -> {"a", "b", "c"} (trimmed; empty items are an error).
std::vector<std::string> SplitLadder(const std::string& ladder);

struct CompressionDecision {
  int rung = 0;               // index into the ladder
  bool uncompressed = false;  // inside a no-compression window
  std::string spec;           // the push codec now: a ladder entry or "none"
  bool changed = false;       // differs from before this update
  std::string reason;         // why (for logs and metrics.jsonl)
};

class CompressionController {
 public:
  explicit CompressionController(const DynamicCompressionConfig& config);
  CompressionDecision current() const;
  // Call once per epoch end with that epoch's test accuracy (0..1) and mean training loss.
  CompressionDecision Update(double test_acc, double train_loss);

 private:
  DynamicCompressionConfig config_;
  std::vector<std::string> ladder_;
  int rung_ = 0;
  int epochs_on_rung_ = 0;
  int uncompressed_left_ = 0;
  bool have_previous_ = false;
  double previous_acc_ = 0, previous_loss_ = 0;
};

// Where the step engine records the push codec's policy changes: the loops' run files
// (loop/run_files.h) implement it, so the engine names no file of the rooms above it.
class PolicyLog {
 public:
  virtual ~PolicyLog() = default;
  // DGC's warm-up: the push density from `step` on, for `epoch`.
  virtual void Density(int64_t epoch, int64_t step, double density) = 0;
  // The dynamic ladder's new push codec after `epoch`'s evaluation.
  virtual void CodecChange(int64_t epoch, int64_t step, const std::string& spec, int rung,
                           const std::string& reason) = 0;
};

}  // namespace gradpress::worker
