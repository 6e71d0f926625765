// A worker's metrics.jsonl lines, dashboard rows and summary.json (run_files.h).
#include "worker/loop/run_files.h"

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "proto/gradpress.pb.h"

namespace gradpress::worker {

RunFiles::RunFiles(std::string run_dir, int rank, std::shared_ptr<RowOutbox> rows)
    : run_dir_(std::move(run_dir)), rank_(rank), rows_(std::move(rows)) {}

void RunFiles::Append(const std::string& line) {
  if (run_dir_.empty()) return;
  std::ofstream f(run_dir_ + "/metrics.jsonl", std::ios::app);
  f << line + "\n";
  f.flush();
}

void RunFiles::Step(const StepMetrics& m) {
  JsonLine line;
  WriteStep(rank_, m, &line);
  Append(line.Done());
  if (rows_) rows_->Put(StepRow(rank_, m));
}

void RunFiles::Epoch(const EpochMetrics& em, int64_t step, double bytes_total) {
  Append(JsonLine()
             .Int("rank", rank_)
             .Int("epoch", em.epoch)
             .Int("step", step)
             .Num("bytes_total", bytes_total)
             .Num("train_acc", em.train_acc)
             .Num("test_acc", em.test_acc)
             .Num("epoch_s", em.epoch_s)
             .Done());
  if (!rows_) return;
  proto::WorkerRow row;
  row.set_kind(proto::WorkerRow::EPOCH);
  row.set_rank(rank_);
  row.set_epoch(static_cast<int32_t>(em.epoch));
  row.set_step(step);
  row.set_train_acc(em.train_acc);
  row.set_test_acc(em.test_acc);
  rows_->Put(row);
}

void RunFiles::Rejoin(int64_t step, int64_t steps_lost, const std::string& shards) {
  JsonLine line;
  line.Int("rank", rank_).Int("step", step).Str("event", "rejoin");
  if (!shards.empty()) line.Str("shards", shards);
  Append(line.Int("steps_lost", steps_lost).Done());
  if (!rows_) return;
  proto::WorkerRow row;
  row.set_kind(proto::WorkerRow::REJOIN);
  row.set_rank(rank_);
  row.set_step(step);
  row.set_steps_lost(steps_lost);
  rows_->Put(row);
}

void RunFiles::CodecChange(int64_t epoch, int64_t step, const std::string& spec, int rung,
                           const std::string& reason) {
  Append(JsonLine()
             .Int("rank", rank_)
             .Int("epoch", epoch)
             .Int("step", step)
             .Str("push_codec", spec)
             .Int("rung", rung)
             .Str("reason", reason)
             .Done());
  if (!rows_) return;
  proto::WorkerRow row;
  row.set_kind(proto::WorkerRow::CODEC);
  row.set_rank(rank_);
  row.set_epoch(static_cast<int32_t>(epoch));
  row.set_step(step);
  row.set_push_codec(spec);
  row.set_rung(rung);
  rows_->Put(row);
}

void RunFiles::Density(int64_t epoch, int64_t step, double density) {
  Append(JsonLine()
             .Int("rank", rank_)
             .Int("epoch", epoch)
             .Int("step", step)
             .Num("push_density", density)
             .Done());
}

void RunFiles::Summary(const Config& c, int workers, const TrainSummary& s,
                       const std::function<void(JsonLine&)>& extra) const {
  if (run_dir_.empty()) return;
  JsonLine line;
  line.Str("name", c.name)
      .Str("method", c.name)
      .Str("model", c.model)
      .Str("dataset", c.dataset.name)
      .Int("workers", workers)
      .Int("steps", s.steps)
      .Int("epochs", s.epochs)
      .Num("test_acc", s.test_acc)
      .Num("bytes_up_per_step", s.bytes_up_per_step)
      .Num("bytes_down_per_step", s.bytes_down_per_step)
      .Num("ratio_up", s.ratio_up)
      .Num("ratio_down", s.ratio_down);
  WriteSummaryFields(s.totals, &line);  // each metric's mean per step (or total)
  line.Bool("overlap", s.overlap).Num("wall_s", s.wall_s).Int("rejoins", s.rejoins);
  if (extra) extra(line);
  const std::string path = run_dir_ + "/summary.json";
  {
    std::ofstream f(path + ".tmp", std::ios::trunc);
    f << line.Done() << "\n";
    GP_ENFORCE(f.good(), "cannot write ", path);
  }
  std::filesystem::rename(path + ".tmp", path);
}

}  // namespace gradpress::worker
