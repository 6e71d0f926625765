#pragma once
// A worker's outputs: its lines of run_dir/metrics.jsonl (steps, epochs, rejoins, codec and
// density changes) with the dashboard's row of each (RowOutbox, carried to the server by the
// next push or heartbeat), and rank 0's run_dir/summary.json (shared/DESIGN.md field names).
// The step's fields come from StepMetrics' one serialiser (step_metrics.h).
//
//   RunFiles files(run_dir, rank, rows);
//   files.Step(m);  files.Epoch(em, step, bytes_total);  files.Summary(config, workers, s);
//
// Thread-safety: one thread (the Trainer's).
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "common/json_line.h"
#include "worker/client/row_outbox.h"
#include "worker/client/step_metrics.h"
#include "worker/engine/compression_schedule.h"

namespace gradpress::worker {

struct EpochMetrics {
  int64_t epoch = 0;
  double train_acc = 0, test_acc = 0, epoch_s = 0;
};

struct TrainSummary {
  int64_t steps = 0, epochs = 0;  // epochs started
  double test_acc = 0;            // last evaluation, 0..1
  double bytes_up_per_step = 0, bytes_down_per_step = 0;
  double ratio_up = 0, ratio_down = 0;  // dense float32 bytes / payload bytes
  MetricTotals totals;                  // the steps' metrics (means per step: totals.Mean)
  // Payload bytes exchanged outside steps (method 6's averaging sync at an epoch's end).
  double extra_bytes_up = 0, extra_bytes_down = 0;
  bool overlap = false;  // the pipelined step ran
  double wall_s = 0;
  int64_t rejoins = 0;  // times the server lost this worker and it registered again
  std::vector<EpochMetrics> epoch_metrics;
};

class RunFiles : public PolicyLog {
 public:
  // run_dir "": no files; rows null: no dashboard rows.
  RunFiles(std::string run_dir, int rank, std::shared_ptr<RowOutbox> rows);
  void Step(const StepMetrics& m);
  // An epoch's evaluation; bytes_total: this worker's payload bytes so far, up + down.
  void Epoch(const EpochMetrics& em, int64_t step, double bytes_total);
  void Rejoin(int64_t step, int64_t steps_lost, const std::string& shards);
  void CodecChange(int64_t epoch, int64_t step, const std::string& spec, int rung,
                   const std::string& reason) override;
  void Density(int64_t epoch, int64_t step, double density) override;
  // summary.json, atomically; `extra` may append fields (gradpress-sim adds runner).
  void Summary(const Config& c, int workers, const TrainSummary& s,
               const std::function<void(JsonLine&)>& extra = {}) const;

 private:
  void Append(const std::string& line);
  std::string run_dir_;
  int rank_;
  std::shared_ptr<RowOutbox> rows_;
};

}  // namespace gradpress::worker
