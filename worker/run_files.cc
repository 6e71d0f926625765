// The run directory's per-step line and summary.json (shared/DESIGN.md field names), shared
// by every Trainer (gradpress-worker and gradpress-sim).
#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/json_line.h"
#include "worker/trainer.h"

namespace gradpress::worker {

JsonLine StepJson(int rank, const StepMetrics& m) {
  JsonLine line;
  line.Int("rank", rank)
      .Int("step", m.step)
      .Num("loss", m.loss)
      .Int("bytes_up", static_cast<int64_t>(m.bytes_up))
      .Int("bytes_down", static_cast<int64_t>(m.bytes_down))
      .Num("compute_ms", m.compute_ms)
      .Num("encode_ms", m.encode_ms)
      .Num("decode_ms", m.decode_ms)
      .Num("network_ms", m.network_ms)
      .Num("wait_ms", m.wait_ms)
      .Num("server_ms", m.server_ms)
      .Num("exposed_comm_ms", m.exposed_comm_ms)
      .Num("step_ms", m.step_ms)
      .Bool("overlap", m.overlap);
  if (m.retries > 0) line.Int("retries", m.retries);
  return line;
}

proto::WorkerRow StepRow(int rank, const StepMetrics& m) {
  proto::WorkerRow r;
  r.set_kind(proto::WorkerRow::STEP);
  r.set_rank(rank);
  r.set_step(m.step);
  r.set_loss(m.loss);
  r.set_bytes_up(m.bytes_up);
  r.set_bytes_down(m.bytes_down);
  r.set_step_ms(m.step_ms);
  r.set_compute_ms(m.compute_ms);
  r.set_encode_ms(m.encode_ms);
  r.set_network_ms(m.network_ms);
  r.set_wait_ms(m.wait_ms);
  r.set_decode_ms(m.decode_ms);
  r.set_server_ms(m.server_ms);
  r.set_exposed_comm_ms(m.exposed_comm_ms);
  r.set_retries(m.retries);
  return r;
}

void WriteSummaryJson(const std::string& run_dir, const Config& c, int workers,
                      const TrainSummary& s, const std::function<void(JsonLine&)>& extra) {
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
      .Num("ratio_down", s.ratio_down)
      .Num("step_ms", s.step_ms)
      .Num("compute_ms", s.compute_ms)
      .Num("encode_ms", s.encode_ms)
      .Num("network_ms", s.network_ms)
      .Num("decode_ms", s.decode_ms)
      .Num("wait_ms", s.wait_ms)
      .Num("server_ms", s.server_ms)
      .Num("exposed_comm_ms", s.exposed_comm_ms)
      .Bool("overlap", s.overlap)
      .Num("wall_s", s.wall_s)
      .Int("retries", s.retries)
      .Int("rejoins", s.rejoins);
  if (extra) extra(line);
  const std::string path = run_dir + "/summary.json";
  {
    std::ofstream f(path + ".tmp", std::ios::trunc);
    f << line.Done() << "\n";
    GP_ENFORCE(f.good(), "cannot write ", path);
  }
  std::filesystem::rename(path + ".tmp", path);
}

}  // namespace gradpress::worker
