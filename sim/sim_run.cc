// Simulator::Run: the Trainer's epoch loop (worker/trainer.cc) for all simulated workers at
// once, with the worker's metrics.jsonl lines (one per worker per step and per epoch) and
// rank 0's summary.json, field for field (shared/DESIGN.md, "Run directory and metrics").
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "common/error.h"
#include "common/json_line.h"
#include "common/timer.h"
#include "sim/simulator.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/lr_schedule.h"

namespace gradpress::sim {

worker::TrainSummary Simulator::Run() {
  const Config& c = opt_.config;
  const int nw = opt_.workers;
  Timer wall;
  std::ofstream metrics;
  if (!opt_.run_dir.empty()) {
    std::filesystem::create_directories(opt_.run_dir);
    metrics.open(opt_.run_dir + "/metrics.jsonl", std::ios::app);
    GP_ENFORCE(metrics.good(), "cannot write ", opt_.run_dir, "/metrics.jsonl");
  }
  auto append = [&](const std::string& line) {
    if (metrics.is_open()) metrics << line << "\n";
  };
  const int64_t n = data_.train.size();
  const int64_t shard = worker::data::ShardSize(n, nw);
  const int64_t batch = c.train.batch_size;
  const int64_t steps_per_epoch = std::max<int64_t>(1, (shard + batch - 1) / batch);
  const bool augment = c.dataset.name == "cifar10";
  const bool own_buffers =
      !periodic() && nw > 1 && !worker::models::BufferTensors(*models_[0]).empty();

  worker::TrainSummary s;
  std::vector<double> up(nw, 0.0), down(nw, 0.0);
  double server_ms = 0;
  Timer since_log;
  int64_t log_images = 0, done = 0;
  for (int64_t epoch = 0; epoch < c.train.epochs; ++epoch) {
    Timer epoch_timer;
    std::vector<std::vector<int64_t>> idx;
    for (int r = 0; r < nw; ++r)
      idx.push_back(
          worker::data::EpochIndices(n, r, nw, epoch, static_cast<uint64_t>(c.train.seed)));
    std::vector<int64_t> correct(nw, 0);
    int64_t seen = 0;
    bool stop = false;
    for (int64_t i = 0; i < steps_per_epoch; ++i) {
      if (opt_.max_steps > 0 && done >= opt_.max_steps) {
        stop = true;
        break;
      }
      const double lr = worker::ScheduledLr(c.train, static_cast<double>(step_) / steps_per_epoch);
      std::vector<worker::data::Dataset> batches;
      for (int r = 0; r < nw; ++r) {
        worker::data::Dataset b =
            worker::data::GatherBatch(data_.train, idx[r], i * batch, (i + 1) * batch);
        if (augment) b.images = worker::data::AugmentCifar(b.images, &workers_[r]->rng);
        batches.push_back(std::move(b));
      }
      const std::vector<SimStepMetrics> ms = Step(batches, lr);
      for (int r = 0; r < nw; ++r) {
        const SimStepMetrics& m = ms[r];
        correct[r] += m.correct;
        up[r] += m.bytes_up;
        down[r] += m.bytes_down;
        append(worker::StepJson(r, m).Num("server_ms", m.server_ms).Done());
      }
      const SimStepMetrics& m = ms[0];  // the summary is rank 0's, as the worker's
      s.step_ms += m.step_ms;
      s.compute_ms += m.compute_ms;
      s.encode_ms += m.encode_ms;
      s.decode_ms += m.decode_ms;
      server_ms += m.server_ms;
      seen += batches[0].size();
      ++done;
      for (const auto& b : batches) log_images += b.size();
      if (c.train.log_every > 0 && m.step % c.train.log_every == 0) {
        spdlog::info(
            "sim epoch {} step {} loss {:.4f} {:.0f} images/s (all {} workers) up {} B down {} "
            "B per worker step",
            epoch, m.step, m.loss, log_images / std::max(1e-9, since_log.ElapsedSeconds()), nw,
            m.bytes_up, m.bytes_down);
        since_log.Restart();
        log_images = 0;
      }
    }
    if (seen == 0 && stop) break;
    std::vector<double> test(nw, 0.0);
    if (periodic()) {
      const double acc = EndEpochPeriodic(epoch, &up, &down);
      std::fill(test.begin(), test.end(), acc);
    } else {
      for (int r = 0; r < nw; ++r) test[r] = (r == 0 || own_buffers) ? Evaluate(r) : test[0];
    }
    const double epoch_s = epoch_timer.ElapsedSeconds();
    for (int r = 0; r < nw; ++r) {
      const double train_acc = seen > 0 ? static_cast<double>(correct[r]) / seen : 0.0;
      append(JsonLine()
                 .Int("rank", r)
                 .Int("epoch", epoch)
                 .Int("step", step_)
                 .Num("bytes_total", up[r] + down[r])
                 .Num("train_acc", train_acc)
                 .Num("test_acc", test[r])
                 .Num("epoch_s", epoch_s)
                 .Done());
      if (r == 0) s.epoch_metrics.push_back({epoch, train_acc, test[0], epoch_s});
    }
    if (metrics.is_open()) metrics.flush();
    s.test_acc = test[0];
    ++s.epochs;
    spdlog::info("sim epoch {} train_acc {:.4f} test_acc {:.4f} ({:.1f} s, {} workers)", epoch,
                 s.epoch_metrics.back().train_acc, test[0], epoch_s, nw);
    if (stop) break;
  }
  s.steps = done;
  const double d = std::max<int64_t>(1, done);
  s.bytes_up_per_step = up[0] / d;
  s.bytes_down_per_step = down[0] / d;
  s.ratio_up = up[0] > 0 ? dense_bytes_ * d / up[0] : 0.0;
  s.ratio_down = down[0] > 0 ? dense_bytes_ * d / down[0] : 0.0;
  s.step_ms /= d;
  s.compute_ms /= d;
  s.encode_ms /= d;
  s.decode_ms /= d;
  server_ms /= d;
  s.network_ms = s.wait_ms = 0;
  s.wall_s = wall.ElapsedSeconds();
  if (!opt_.run_dir.empty() && done > 0)
    worker::WriteSummaryJson(opt_.run_dir, c, nw, s, [&](JsonLine& line) {
      line.Num("server_ms", server_ms).Str("runner", "sim");
    });
  return s;
}

}  // namespace gradpress::sim
