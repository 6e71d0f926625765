#pragma once
// Accuracy against steps from a finished run (its metrics.jsonl epoch lines, rank 0), for
// the planner's time to accuracy: the steps a method needed to reach a test accuracy, times
// its predicted step on the cluster in question (docs/planner.md).
//
//   std::vector<AccuracyPoint> curve = ReadAccuracy("runs/lenet-fmnist-m5/20261126-0940");
//   std::optional<int64_t> steps = StepsToAccuracy(curve, 0.85);  // an epoch's end, or none
//
// Throws InvalidArgument naming the file when metrics.jsonl is missing, unreadable or has no
// epoch line of rank 0. Thread-safety: pure functions.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gradpress::plan {

struct AccuracyPoint {
  int64_t step = 0;  // steps done at the end of the epoch
  double test_acc = 0;
};

std::vector<AccuracyPoint> ReadAccuracy(const std::string& run_dir);

// The first epoch end at or above `target` (epoch granularity: what the run measured).
std::optional<int64_t> StepsToAccuracy(const std::vector<AccuracyPoint>& curve, double target);

}  // namespace gradpress::plan
