// Trainer::Run: the epoch loop (data order, prefetching, checkpoints, rejoin, evaluation,
// dynamic compression, the run's outputs). The step itself is in trainer.cc.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <future>
#include <memory>
#include <random>

#include "common/error.h"
#include "common/task_threads.h"
#include "common/timer.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/loop/lr_schedule.h"
#include "worker/loop/trainer.h"
#include "worker/models/blas.h"

namespace gradpress::worker {

// A batch gathered (and augmented) ahead, on the prefetch thread: it draws from a copy of the
// RNG, adopted when the batch is used, so checkpoints (taken between steps) hold the RNG of
// the step they are at.
struct Batch {
  torch::Tensor images, labels;
  int64_t size = 0;
  std::mt19937_64 rng;
};

// One epoch's loop state, and the run's counters it adds to.
struct Trainer::Epoch {
  int64_t epoch = 0;
  std::vector<int64_t> idx;  // the epoch's order of this worker's shard
  int64_t correct = 0, seen = 0;
  bool stop = false, rejoined = false;
  int64_t* done = nullptr;  // steps kept in all (max_steps counts them)
  Timer timer, since_log;
  int64_t log_images = 0;
  StepMetrics bytes;  // this worker's payload bytes so far (epoch lines' bytes_total)
  TaskThreads* prefetch = nullptr;
};

TrainSummary Trainer::Run() {
  const Config& c = opt_.config;
  Timer wall;
  if (!opt_.run_dir.empty()) std::filesystem::create_directories(opt_.run_dir);
  SetComputeThreads(c.train.threads);  // this thread trains (OpenMP's setting is per thread)
  Connect();
  TrainSummary s;
  int64_t done = 0;
  TaskThreads prefetch;  // the batch loads, on one long-lived thread
  Epoch e;
  e.done = &done;
  e.prefetch = &prefetch;
  // Resume position: a worker that joined late starts at the server's step.
  for (int64_t epoch = step() / steps_per_epoch_; epoch < c.train.epochs; ++epoch) {
    e.epoch = epoch;
    e.idx = data::EpochIndices(data_.train.size(), opt_.rank, opt_.workers, epoch,
                               static_cast<uint64_t>(c.train.seed));
    e.correct = e.seen = 0;
    e.stop = e.rejoined = false;
    e.timer.Restart();
    engine_->StartEpoch(epoch);
    RunEpoch(&e, &s);
    if (e.rejoined) {  // back to the server's step: restart the loop at its epoch and batch
      epoch = step() / steps_per_epoch_ - 1;
      continue;
    }
    if (e.stop) WriteCheckpoint();  // the state right after the last step, before evaluation
    if (e.seen == 0 && e.stop) break;
    EndEpoch(&e, &s);
    if (e.stop) break;
  }
  WriteCheckpoint();  // the end state (a no-op if the last step's checkpoint exists)
  Settle();
  for (const StepMetrics& row : TakeFinished()) Account(row, &e, &s);
  s.steps = done;
  Finish(&s, wall.ElapsedSeconds());
  return s;
}

void Trainer::RunEpoch(Epoch* e, TrainSummary* s) {
  const Config& c = opt_.config;
  const int64_t batch = c.train.batch_size;
  const bool augment = c.dataset.name == "cifar10";
  auto load = [&](int64_t i, std::mt19937_64 rng) {
    data::Dataset d = data::GatherBatch(data_.train, e->idx, i * batch, (i + 1) * batch);
    return Batch{augment ? data::AugmentCifar(d.images, &rng) : d.images, d.labels, d.size(), rng};
  };
  std::future<Batch> next;
  // Any way out of this epoch (break, rejoin, a throw) waits for the load in flight: it reads
  // e->idx and `load`.
  struct WaitForLoad {
    std::future<Batch>& f;
    ~WaitForLoad() {
      if (f.valid()) f.wait();
    }
  } wait_for_load{next};
  int64_t& done = *e->done;
  for (int64_t i = step() - e->epoch * steps_per_epoch_; i < steps_per_epoch_; ++i) {
    if ((opt_.max_steps > 0 && done >= opt_.max_steps) || (opt_.stop && opt_.stop->load())) {
      e->stop = true;
      break;
    }
    Batch b = next.valid() ? next.get() : load(i, rng_);
    rng_ = b.rng;  // the augmentation RNG after this batch (checkpointed with the step)
    if (i + 1 < steps_per_epoch_) {
      auto task = std::make_shared<std::packaged_task<Batch()>>(
          [&load, i, rng = rng_] { return load(i + 1, rng); });
      next = task->get_future();
      if (!e->prefetch->Run([task] { (*task)(); })) (*task)();  // no thread: load it now
    }
    StepMetrics m;
    bool checkpoint_now = false;
    try {
      m = Step(b.images, b.labels);
      const ExchangeState at = engine_->State();
      checkpoint_now = c.train.checkpoint_every > 0 && at.since_exchange == 0 &&
                       at.server_step % c.train.checkpoint_every == 0;
      const bool last =
          i + 1 == steps_per_epoch_ || (opt_.max_steps > 0 && done + 1 >= opt_.max_steps);
      // Cross-barrier: the step's results arrive during the next forward; before anything
      // else reads the weights they are settled here, where a lost server is handled.
      if (last || checkpoint_now) Settle();
    } catch (const Error& err) {
      if (!LostByServer(err)) throw;
      const int64_t lost = Rejoin(err);
      if (lost < 0) throw;
      done = std::max<int64_t>(0, done - lost);  // max_steps counts the steps kept
      ++s->rejoins;
      e->rejoined = true;
      break;
    }
    e->correct += m.correct;
    e->seen += b.size;
    ++done;
    e->log_images += b.size;
    if (checkpoint_now) WriteCheckpoint();
    for (const StepMetrics& row : TakeFinished()) Account(row, e, s);
  }
  for (const StepMetrics& row : TakeFinished()) Account(row, e, s);
}

// A step's row, once complete (cross-barrier: after the next step's forward).
void Trainer::Account(const StepMetrics& m, Epoch* e, TrainSummary* s) {
  s->totals.Add(m);
  Merge(m, Concurrency::kSerial, &e->bytes);
  files_.Step(m);
  const int log_every = opt_.config.train.log_every;
  if (log_every <= 0 || m.step % log_every != 0) return;
  spdlog::info(
      "worker-{} epoch {} step {} loss {:.4f} {:.0f} images/s up {} B down {} B per step "
      "ratio {:.1f}/{:.1f}",
      opt_.rank, e->epoch, m.step, m.loss,
      e->log_images / std::max(1e-9, e->since_log.ElapsedSeconds()), m.bytes_up, m.bytes_down,
      m.bytes_up ? static_cast<double>(dense_bytes_) / m.bytes_up : 0.0,
      m.bytes_down ? static_cast<double>(dense_bytes_) / m.bytes_down : 0.0);
  e->since_log.Restart();
  e->log_images = 0;
}

void Trainer::EndEpoch(Epoch* e, TrainSummary* s) {
  EpochMetrics em;
  em.epoch = e->epoch;
  em.train_acc = e->seen > 0 ? static_cast<double>(e->correct) / e->seen : 0.0;
  StepMetrics sync;  // method 6's last averaging of the epoch, if any
  // The dynamic ladder decides from the training loss on the same fixed training images on
  // every worker (their weights are equal), so all take the same decision; the mean loss of
  // their own batches differs by shard.
  em.test_acc = engine_->EndEpoch(
      e->epoch, [this] { return Evaluate(); }, [this] { return ProbeTrainLoss(4096); },
      /*adapt=*/e->seen > 0 && !e->stop, &sync);
  Merge(sync, Concurrency::kSerial, &e->bytes);
  s->extra_bytes_up += sync.bytes_up;
  s->extra_bytes_down += sync.bytes_down;
  em.epoch_s = e->timer.ElapsedSeconds();
  s->epoch_metrics.push_back(em);
  s->test_acc = em.test_acc;
  ++s->epochs;
  files_.Epoch(em, step(), static_cast<double>(e->bytes.bytes_up + e->bytes.bytes_down));
  spdlog::info("worker-{} epoch {} train_acc {:.4f} test_acc {:.4f} ({:.1f} s)", opt_.rank,
               e->epoch, em.train_acc, em.test_acc, em.epoch_s);
}

void Trainer::Finish(TrainSummary* s, double wall_s) {
  const double d = std::max<int64_t>(1, s->steps);
  const double up = s->totals.Sum("bytes_up") + s->extra_bytes_up,
               down = s->totals.Sum("bytes_down") + s->extra_bytes_down;
  s->bytes_up_per_step = up / d;
  s->bytes_down_per_step = down / d;
  s->ratio_up = up > 0 ? dense_bytes_ * d / up : 0.0;
  s->ratio_down = down > 0 ? dense_bytes_ * d / down : 0.0;
  s->overlap = engine_->traits().overlaps;
  s->wall_s = wall_s;
  if (opt_.rank == 0 && s->steps > 0)  // a resumed, finished run keeps its own
    files_.Summary(opt_.config, opt_.workers, *s, opt_.summary_extra);
  try {
    engine_->client().Heartbeat();  // carries the dashboard's last rows (no push follows them)
  } catch (const Error& err) {
    spdlog::warn("worker-{}: the last rows for the server's dashboard were not sent: {}", opt_.rank,
                 err.what());
  }
  if (s->steps == 0) spdlog::info("worker-{}: nothing left to train at step {}", opt_.rank, step());
}

}  // namespace gradpress::worker
