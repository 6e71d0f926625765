#pragma once
// What gradpress-plan prints (plan_main.cc): per method the predicted step for the cluster,
// the same over a sweep of link rates with each method's crossover against the first (the
// baseline), and a suggestion naming the fastest method at the cluster's rate and why.
//
//   std::cout << Report(calibrations, cluster, {0.1, 1, 10}, /*json=*/false);
//   Plot(calibrations, cluster, {0.1, 1, 10}, "plan.png");   // gnuplot, PNG
//
// json: one object per (method, rate): method, workers, shards, rate_gbps, latency_ms,
// overlap, topology, step_ms, compute_ms, exposed_comm_ms, comm_share, bytes_up, bytes_down, and
// with an accuracy target steps_to_target and time_to_target_s (steps x predicted step; absent when
// the method's run never reached it). Plot throws gradpress::Error when gnuplot is missing or
// fails. Thread-safety: pure functions (Plot writes its files).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "worker/engine/step_model.h"

namespace gradpress::plan {

// The step model (worker/engine/step_model.h: compress.auto uses it too), in the planner's words.
using worker::BucketProfile;
using worker::Calibration;
using worker::Cluster;
using worker::CrossoverRate;
using worker::PredictStep;
using worker::StepPrediction;

// Time to accuracy (--accuracy, --target-acc): per method (same order), the steps its run
// needed to reach target_acc, or none when it did not; empty: not asked.
struct AccuracyTarget {
  double target_acc = 0;
  std::vector<std::optional<int64_t>> steps;
};

std::string Report(const std::vector<Calibration>& methods, const Cluster& cluster,
                   const std::vector<double>& rates, bool json, const AccuracyTarget& acc = {});

// The fastest method at the cluster's rate and why, in a sentence: by step time, or with an
// accuracy target by the predicted time to it (a method whose run never reached it is not
// chosen).
std::string Suggest(const std::vector<Calibration>& methods, const Cluster& cluster,
                    const AccuracyTarget& acc = {});

void Plot(const std::vector<Calibration>& methods, const Cluster& cluster,
          const std::vector<double>& rates, const std::string& png);

}  // namespace gradpress::plan
