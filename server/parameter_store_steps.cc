// ParameterStore: the step flow -- a lane's finalize once every live worker pushed it, the
// async step, pulls -- and the liveness and counters around it. Registration is in
// parameter_store.cc, a push's arrival and landing in parameter_store_push.cc and
// parameter_store_landing.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "common/shape.h"
#include "common/timer.h"
#include "server/parameter_store.h"
#include "server/push_session.h"

namespace gradpress::server {

using compressors::Payload;

PushPullResult StoreState::AsyncPush(PushState& st) {
  std::shared_ptr<const StepResult> previous;  // freed after the lock is released
  std::unique_lock<std::mutex> lock(mu_);
  agg_.lanes().front()->in_flight.erase(st.w.name);  // async: one lane
  // One step at a time, and no checkpoint copy meanwhile; the other calls go on.
  KeyHold hold(&holds_, &lock, &step_cv_, KeyHolds::kWrite);
  Member& ws = *members_.Find(st.w.name);  // checked by BeginPush; members are never removed
  if (st.step <= ws.async_step) {
    ++stats_.duplicates;
    hold.Release();
    return {AsyncResult(&lock), 0, 0, true};
  }
  // Re-check staleness: other pushes may have landed while this one was validated.
  if (step_ - st.base_step > opt_.max_staleness) {
    ++stats_.rejected["stale_or_out_of_order"];
    throw FailedPrecondition(
        "worker '" + st.w.name + "': push computed on step " + std::to_string(st.base_step) +
            " became " + std::to_string(step_ - st.base_step) + " steps stale (max_staleness " +
            std::to_string(opt_.max_staleness) + ")",
        Reason::kStalePush);
  }
  Timer t;
  SgdOptions sgd = opt_.sgd;
  if (st.lr) sgd.lr = *st.lr;
  const int64_t next = step_ + 1;
  // A checkpoint of the step holds the pull codec's state before the step's encode, as one
  // written between steps does: a restored server encodes the same bytes.
  std::optional<Checkpoint> ckpt;
  if (opt_.checkpoint_every > 0 && next % opt_.checkpoint_every == 0 &&
      !opt_.checkpoint_dir.empty() && last_checkpoint_step_ < next) {
    ckpt = CheckpointMeta(next);
  }
  std::shared_ptr<StepResult> weights;
  Unlocked(&lock, [&] {
    pool_.ParallelFor(static_cast<int64_t>(model_.size()), [&](int64_t i) {
      KeyState& k = model_.key(i);
      SgdOptions key = sgd;  // the key's param group's lr, when the push named one
      if (!st.key_lr.empty()) key.lr = st.key_lr[i];
      SgdStep(key, k.weights.data(), st.dst[i], k.numel, &k.sgd);
    });
    if (ckpt) model_.Save(&*ckpt);
    weights = model_.Encode(next, /*weights=*/true, false, 0, model_.size(), 1.f, nullptr);
  });
  stats_.bytes_in += st.bytes;
  ++stats_.pushes_applied;
  ws.async_step = st.step;
  step_ = next;
  agg_.SetStep(step_);
  ++stats_.steps;
  previous = model_.KeepAsyncWeights(weights);
  const double ms = t.ElapsedMs();
  total_server_ms_ += ms;
  step_cv_.notify_all();
  if (ckpt) AwaitCheckpointTurn(&lock);  // before the next step may copy its own
  hold.Release();
  if (ckpt) {
    try {
      WriteCheckpointFile(&lock, std::move(*ckpt));
    } catch (const Error& e) {  // a full disk must not stop training
      spdlog::error("checkpoint of step {} failed: {}", ckpt->step, e.what());
    }
  }
  return {weights, 0, ms, false};
}

std::shared_ptr<const StepResult> StoreState::AsyncResult(std::unique_lock<std::mutex>* lock) {
  if (auto r = model_.AsyncWeights(step_)) return r;
  std::shared_ptr<const StepResult> previous;
  KeyHold hold(&holds_, lock, &step_cv_, KeyHolds::kWrite);  // the encode steps the pull codec
  const int64_t step = step_;
  if (auto r = model_.AsyncWeights(step)) return r;  // encoded while this call waited
  std::shared_ptr<StepResult> r;
  Unlocked(lock, [&] {
    r = model_.Encode(step, /*weights=*/true, false, 0, model_.size(), 1.f, nullptr);
  });
  previous = model_.KeepAsyncWeights(r);
  Unlocked(lock, [&] { previous.reset(); });  // the older weights' pages, without mu_
  return r;
}

void StoreState::MaybeFinalize(Lane& lane, std::unique_lock<std::mutex>* lock) {
  for (;;) {
    if (lane.finalizing || lane.contributors == 0 || lane.accum_owned) return;
    if (members_.Starting(lane.index == 0, lane.step) || !Aggregation::Ready(lane, members_))
      return;
    if (holds_.CanFinalize()) break;
    step_cv_.wait(*lock);  // a checkpoint's copy or new weights hold the keys: after them
  }
  Aggregation::Closing closing = Aggregation::Close(lane);
  holds_.BeginFinalize();
  std::shared_ptr<StepResult> result;
  {
    struct End {  // whatever happens, the lane's keys are given back
      KeyHolds* holds;
      ~End() { holds->EndFinalize(); }
    } end{&holds_};
    Unlocked(lock, [&] { result = Aggregation::Compute(lane, &closing, &model_, opt_, &pool_); });
  }
  Aggregation::Publish(lane, closing, result);
  stats_.pushes_applied += static_cast<uint64_t>(result->contributors);
  total_server_ms_ += result->server_ms;
  step_cv_.notify_all();
  if (!agg_.Even()) return;  // the step is complete once its last bucket is
  step_ = lane.step;
  ++stats_.steps;
  if (opt_.stats_every > 0 && stats_.steps % opt_.stats_every == 0) {
    uint64_t rejected = 0;
    for (const auto& [reason, n] : stats_.rejected) rejected += n;
    spdlog::info(
        "step {}: {} workers, {:.1f} MB in, {:.1f} MB out, {:.2f} ms server/step, {} "
        "rejected",
        step_, result->contributors, stats_.bytes_in / 1e6, stats_.bytes_out / 1e6,
        total_server_ms_ / static_cast<double>(stats_.steps), rejected);
  }
  MaybeCheckpoint(lock);
}

void StoreState::MaybeFinalizeAll(std::unique_lock<std::mutex>* lock) {
  // By index: a finalize releases mu_ (the lanes stay: a lane with pushes is not re-split).
  for (size_t i = 0; i < agg_.size(); ++i) MaybeFinalize(*agg_.lanes()[i], lock);
}

std::shared_ptr<const StepResult> ParameterStore::Pull(const WorkerId& w, int64_t step,
                                                       Clock::time_point deadline, int bucket) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  GP_REFUSE(FailedPrecondition, Reason::kNotInitialized, model_.initialized,
            "the server has no weights yet");
  if (opt_.async) return AsyncResult(&lock);
  const Lane* lane = bucket >= 0 || agg_.size() == 1 ? &agg_.Of(bucket, w) : nullptr;
  // A finalizing lane has given its previous result's buffers to the next: its newest result
  // is the one being made.
  auto finalizing = [&] {
    if (lane) return lane->finalizing;
    for (const auto& l : agg_.lanes())
      if (l->finalizing) return true;
    return false;
  };
  step_cv_.wait_until(lock, deadline, [&] { return shutdown_ || !finalizing(); });
  GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
  GP_REFUSE(Unavailable, Reason::kTimedOut, !finalizing(), "timed out waiting for step ", step,
            "; retry");
  if (step < 0) {
    step = (lane ? lane->step : step_) - 1;
    GP_REFUSE(FailedPrecondition, Reason::kResultDropped, step >= 0, "no step has completed yet");
  }
  auto done = [&] { return lane ? lane->step > step : step_ > step; };
  step_cv_.wait_until(lock, deadline, [&] { return shutdown_ || done(); });
  GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
  GP_REFUSE(Unavailable, Reason::kTimedOut, done(), "timed out waiting for step ", step, "; retry");
  auto r = lane ? lane->Find(step) : agg_.Joined(step);
  GP_REFUSE(FailedPrecondition, Reason::kResultDropped, r != nullptr, "result of step ", step,
            " is no longer kept (server step ", step_, ")");
  return r;
}

int64_t ParameterStore::Heartbeat(const WorkerId& w) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckWorker(w);
  return step_;
}

void ParameterStore::CheckTimeouts() {
  std::unique_lock<std::mutex> lock(mu_);
  members_.DropSilent(Clock::now(), step_);
  MaybeFinalizeAll(&lock);  // a drop, or the registration grace ending, may complete the step
  if (elections_.Complete(members_)) step_cv_.notify_all();
}

void ParameterStore::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  step_cv_.notify_all();
}

void ParameterStore::CountBytesOut(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_out += bytes;
}

void ParameterStore::CountFaultInjected() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.faults_injected;
}

std::vector<TensorSpec> ParameterStore::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_.specs();
}

int64_t ParameterStore::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_;
}

std::map<std::string, Member> ParameterStore::Members() const {
  std::lock_guard<std::mutex> lock(mu_);
  return members_.members();
}

StoreStats ParameterStore::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  StoreStats s = stats_;
  s.live_workers = members_.Live();
  s.mean_server_ms = s.steps ? total_server_ms_ / static_cast<double>(s.steps) : 0.0;
  for (const auto& lane : agg_.lanes()) s.staging_buffers += lane->staging_count;
  s.weights_waiting = weights_waiting_;
  return s;
}

std::string StoreStats::Prometheus() const {
  std::ostringstream os;
  os << "# TYPE gradpress_steps_total counter\ngradpress_steps_total " << steps << "\n"
     << "# TYPE gradpress_bytes_in_total counter\ngradpress_bytes_in_total " << bytes_in << "\n"
     << "# TYPE gradpress_bytes_out_total counter\ngradpress_bytes_out_total " << bytes_out
     << "\n# TYPE gradpress_live_workers gauge\ngradpress_live_workers " << live_workers << "\n"
     << "# TYPE gradpress_step_server_ms gauge\ngradpress_step_server_ms " << mean_server_ms
     << "\n# TYPE gradpress_pushes_applied_total counter\ngradpress_pushes_applied_total "
     << pushes_applied
     << "\n# TYPE gradpress_duplicate_pushes_total counter\ngradpress_duplicate_pushes_total "
     << duplicates << "\n# TYPE gradpress_faults_injected_total counter\n"
     << "gradpress_faults_injected_total " << faults_injected << "\n"
     << "# TYPE gradpress_weights_waiting gauge\ngradpress_weights_waiting " << weights_waiting
     << "\n# TYPE gradpress_rejected_total counter\n";
  for (const auto& [reason, n] : rejected)
    os << "gradpress_rejected_total{reason=\"" << reason << "\"} " << n << "\n";
  return os.str();
}

}  // namespace gradpress::server
