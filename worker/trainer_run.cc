// Trainer::Run: the epoch loop (data order, prefetching, checkpoints, rejoin, evaluation,
// dynamic compression, the run directory's lines). The step itself is in trainer.cc.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <future>
#include <memory>
#include <random>

#include "common/error.h"
#include "common/json_line.h"
#include "common/task_threads.h"
#include "common/timer.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/lr_schedule.h"
#include "worker/trainer.h"

namespace gradpress::worker {

TrainSummary Trainer::Run() {
  const Config& c = opt_.config;
  Timer wall;
  if (!opt_.run_dir.empty()) std::filesystem::create_directories(opt_.run_dir);
  Connect();
  const int64_t n = data_.train.size();
  const int64_t shard = data::ShardSize(n, opt_.workers);
  const int64_t batch = c.train.batch_size;
  const int64_t steps_per_epoch = std::max<int64_t>(1, (shard + batch - 1) / batch);
  const bool augment = c.dataset.name == "cifar10";

  TrainSummary s;
  double sum_up = 0, sum_down = 0;
  Timer since_log;
  int64_t log_images = 0;
  int64_t done = 0;
  // A step's row, once complete (cross-barrier: after the next step's forward).
  auto account = [&](const StepMetrics& m, int64_t epoch) {
    sum_up += m.bytes_up;
    sum_down += m.bytes_down;
    s.step_ms += m.step_ms;
    s.compute_ms += m.compute_ms;
    s.encode_ms += m.encode_ms;
    s.decode_ms += m.decode_ms;
    s.network_ms += m.network_ms;
    s.wait_ms += m.wait_ms;
    s.server_ms += m.server_ms;
    s.exposed_comm_ms += m.exposed_comm_ms;
    s.retries += m.retries;
    AppendLine(StepJson(opt_.rank, m).Done());
    client_->Report(StepRow(opt_.rank, m));
    if (c.train.log_every > 0 && m.step % c.train.log_every == 0) {
      spdlog::info(
          "worker-{} epoch {} step {} loss {:.4f} {:.0f} images/s up {} B down {} B per step "
          "ratio {:.1f}/{:.1f}",
          opt_.rank, epoch, m.step, m.loss, log_images / std::max(1e-9, since_log.ElapsedSeconds()),
          m.bytes_up, m.bytes_down,
          m.bytes_up ? static_cast<double>(dense_bytes_) / m.bytes_up : 0.0,
          m.bytes_down ? static_cast<double>(dense_bytes_) / m.bytes_down : 0.0);
      since_log.Restart();
      log_images = 0;
    }
  };
  // The batch loads run on one long-lived thread, not a thread per step.
  TaskThreads prefetch;
  // Resume position: a worker that joined late starts at the server's step.
  for (int64_t epoch = step_ / steps_per_epoch; epoch < c.train.epochs; ++epoch) {
    Timer epoch_timer;
    const std::vector<int64_t> idx =
        data::EpochIndices(n, opt_.rank, opt_.workers, epoch, static_cast<uint64_t>(c.train.seed));
    int64_t correct = 0, seen = 0;
    bool stop = false, rejoined = false;
    if (c.compress.warmup_epochs > 0) {
      const double density = WarmupDensity(push_ratio_, c.compress.warmup_epochs, epoch);
      GP_ENFORCE(client_->SetPushDensity(density), "compress.warmup_epochs: push codec '",
                 c.push.codec, "' has no density to warm up");
      if (epoch <= c.compress.warmup_epochs) {
        spdlog::info("worker-{} epoch {}: push density {:.6g} (sparsity warm-up)", opt_.rank, epoch,
                     density);
        AppendLine(JsonLine()
                       .Int("rank", opt_.rank)
                       .Int("epoch", epoch)
                       .Int("step", step_)
                       .Num("push_density", density)
                       .Done());
      }
    }
    // The next batch is gathered and augmented on another thread while a step runs; it
    // draws from a copy of the RNG, adopted when the batch is used, so checkpoints (taken
    // between steps) hold the RNG of the step they are at.
    struct Batch {
      torch::Tensor images, labels;
      int64_t size = 0;
      std::mt19937_64 rng;
    };
    auto load = [&](int64_t i, std::mt19937_64 rng) {
      data::Dataset d = data::GatherBatch(data_.train, idx, i * batch, (i + 1) * batch);
      Batch out{augment ? data::AugmentCifar(d.images, &rng) : d.images, d.labels, d.size(), rng};
      return out;
    };
    std::future<Batch> next;
    // Any way out of this epoch (break, rejoin, a throw) waits for the load in flight: it
    // reads `idx` and `load`, which end with the epoch.
    struct WaitForLoad {
      std::future<Batch>& f;
      ~WaitForLoad() {
        if (f.valid()) f.wait();
      }
    } wait_for_load{next};
    for (int64_t i = step_ - epoch * steps_per_epoch; i < steps_per_epoch; ++i) {
      if ((opt_.max_steps > 0 && done >= opt_.max_steps) || (opt_.stop && opt_.stop->load())) {
        stop = true;
        break;
      }
      const double lr = ScheduledLr(c.train, static_cast<double>(step_) / steps_per_epoch);
      exchange_->SetLr(lr);
      Batch b = next.valid() ? next.get() : load(i, rng_);
      rng_ = b.rng;  // the augmentation RNG after this batch (checkpointed with the step)
      if (i + 1 < steps_per_epoch) {
        auto task = std::make_shared<std::packaged_task<Batch()>>(
            [&load, i, rng = rng_] { return load(i + 1, rng); });
        next = task->get_future();
        if (!prefetch.Run([task] { (*task)(); })) (*task)();  // no thread: load it now
      }
      StepMetrics m;
      bool checkpoint_now = false;
      try {
        m = Step(b.images, b.labels);
        checkpoint_now = c.train.checkpoint_every > 0 && exchange_->since_exchange() == 0 &&
                         server_step() % c.train.checkpoint_every == 0;
        const bool last =
            i + 1 == steps_per_epoch || (opt_.max_steps > 0 && done + 1 >= opt_.max_steps);
        // Cross-barrier: the step's results arrive during the next forward; before anything
        // else reads the weights they are settled here, where a lost server is handled.
        if (last || checkpoint_now) Settle();
      } catch (const Error& e) {
        if (!LostByServer(e)) throw;
        const int64_t lost = Rejoin(e);
        if (lost < 0) throw;
        done = std::max<int64_t>(0, done - lost);  // max_steps counts the steps kept
        ++s.rejoins;
        rejoined = true;
        break;
      }
      correct += m.correct;
      seen += b.size;
      ++done;
      log_images += b.size;
      if (checkpoint_now) WriteCheckpoint();
      for (const StepMetrics& row : TakeFinished()) account(row, epoch);
    }
    for (const StepMetrics& row : TakeFinished()) account(row, epoch);
    if (rejoined) {
      // Back to the server's step: restart the loop at its epoch and batch.
      epoch = step_ / steps_per_epoch - 1;
      continue;
    }
    if (stop) WriteCheckpoint();  // the state right after the last step, before evaluation
    if (seen == 0 && stop) break;
    EpochMetrics em;
    em.epoch = epoch;
    em.train_acc = seen > 0 ? static_cast<double>(correct) / seen : 0.0;
    em.test_acc = exchange_->EndEpoch(
        epoch, [this] { return Evaluate(); }, server_rank_, &sum_up, &sum_down);
    em.epoch_s = epoch_timer.ElapsedSeconds();
    s.epoch_metrics.push_back(em);
    s.test_acc = em.test_acc;
    ++s.epochs;
    AppendLine(JsonLine()
                   .Int("rank", opt_.rank)
                   .Int("epoch", em.epoch)
                   .Int("step", step_)
                   .Num("bytes_total", sum_up + sum_down)  // this worker's, cumulative
                   .Num("train_acc", em.train_acc)
                   .Num("test_acc", em.test_acc)
                   .Num("epoch_s", em.epoch_s)
                   .Done());
    proto::WorkerRow row;
    row.set_kind(proto::WorkerRow::EPOCH);
    row.set_rank(opt_.rank);
    row.set_epoch(static_cast<int32_t>(em.epoch));
    row.set_step(step_);
    row.set_train_acc(em.train_acc);
    row.set_test_acc(em.test_acc);
    client_->Report(row);
    spdlog::info("worker-{} epoch {} train_acc {:.4f} test_acc {:.4f} ({:.1f} s)", opt_.rank, epoch,
                 em.train_acc, em.test_acc, em.epoch_s);
    if (controller_ && seen > 0 && !stop) {
      // The training loss on the same fixed training images on every worker (their weights
      // are equal), so all workers take the same decision; the mean loss of their own
      // batches differs by shard.
      const CompressionDecision d = controller_->Update(em.test_acc, ProbeTrainLoss(4096));
      if (d.changed) SetPushCodec(d, epoch);
    }
    if (stop) break;
  }
  WriteCheckpoint();  // the end state (a no-op if the last step's checkpoint exists)
  Settle();
  for (const StepMetrics& row : TakeFinished()) account(row, c.train.epochs - 1);
  s.steps = done;
  const double d = std::max<int64_t>(1, done);
  s.bytes_up_per_step = sum_up / d;
  s.bytes_down_per_step = sum_down / d;
  s.ratio_up = sum_up > 0 ? dense_bytes_ * d / sum_up : 0.0;
  s.ratio_down = sum_down > 0 ? dense_bytes_ * d / sum_down : 0.0;
  s.step_ms /= d;
  s.compute_ms /= d;
  s.encode_ms /= d;
  s.decode_ms /= d;
  s.network_ms /= d;
  s.wait_ms /= d;
  s.server_ms /= d;
  s.exposed_comm_ms /= d;
  s.overlap = exchange_->overlaps();
  s.wall_s = wall.ElapsedSeconds();
  if (opt_.rank == 0 && done > 0) WriteSummary(s);  // a resumed, finished run keeps its own
  try {
    client_->Heartbeat();  // carries the dashboard's last rows (no push follows them)
  } catch (const Error& e) {
    spdlog::warn("worker-{}: the last rows for the server's dashboard were not sent: {}", opt_.rank,
                 e.what());
  }
  if (done == 0) spdlog::info("worker-{}: nothing left to train at step {}", opt_.rank, step_);
  return s;
}

}  // namespace gradpress::worker
