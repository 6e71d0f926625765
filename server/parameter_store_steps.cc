// ParameterStore, part two: the step flow (push, barrier, finalize, async, pull) and the
// liveness and counters around it. Registration and validation are in parameter_store.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "common/shape.h"
#include "common/timer.h"
#include "server/parameter_store.h"

namespace gradpress::server {

using compressors::Payload;

PushPullResult ParameterStore::AsyncPush(const WorkerId& w, int64_t step, int64_t base_step,
                                         const std::vector<float*>& grads, uint64_t bytes,
                                         std::optional<double> lr) {
  std::lock_guard<std::mutex> lock(mu_);
  agg_.lanes().front()->in_flight.erase(w.name);  // async: one lane
  Member& ws = *members_.Find(w.name);            // checked by BeginPush; members are never removed
  if (step <= ws.async_step) {
    ++stats_.duplicates;
    return {model_.AsyncWeights(step_), 0, 0, true};
  }
  // Re-check staleness: other pushes may have landed while this one was validated.
  if (step_ - base_step > opt_.max_staleness) {
    ++stats_.rejected["stale_or_out_of_order"];
    throw FailedPrecondition(
        "worker '" + w.name + "': push computed on step " + std::to_string(base_step) + " became " +
            std::to_string(step_ - base_step) + " steps stale (max_staleness " +
            std::to_string(opt_.max_staleness) + ")",
        Reason::kStalePush);
  }
  Timer t;
  SgdOptions sgd = opt_.sgd;
  if (lr) sgd.lr = *lr;
  pool_.ParallelFor(static_cast<int64_t>(model_.size()), [&](int64_t i) {
    KeyState& k = model_.key(i);
    SgdStep(sgd, k.weights.data(), grads[i], k.numel, &k.sgd);
  });
  stats_.bytes_in += bytes;
  ws.async_step = step;
  ++step_;
  agg_.SetStep(step_);
  ++stats_.steps;
  MaybeCheckpoint();
  total_server_ms_ += t.ElapsedMs();
  return {model_.AsyncWeights(step_), 0, t.ElapsedMs(), false};
}

void ParameterStore::MaybeFinalize(Lane& lane) {
  if (lane.contributors == 0 || lane.accum_owned) return;
  if (members_.Starting(lane.index == 0, lane.step) || !Aggregation::Ready(lane, members_)) return;
  auto result = Aggregation::Finalize(lane, &model_, opt_, &pool_);
  total_server_ms_ += result->server_ms;
  step_cv_.notify_all();
  if (!agg_.Even()) return;  // the step is complete once its last bucket is
  step_ = lane.step;
  ++stats_.steps;
  MaybeCheckpoint();
  if (opt_.stats_every > 0 && stats_.steps % opt_.stats_every == 0) {
    uint64_t rejected = 0;
    for (const auto& [reason, n] : stats_.rejected) rejected += n;
    spdlog::info(
        "step {}: {} workers, {:.1f} MB in, {:.1f} MB out, {:.2f} ms server/step, {} "
        "rejected",
        step_, result->contributors, stats_.bytes_in / 1e6, stats_.bytes_out / 1e6,
        total_server_ms_ / static_cast<double>(stats_.steps), rejected);
  }
}

void ParameterStore::MaybeFinalizeAll() {
  for (const auto& lane : agg_.lanes()) MaybeFinalize(*lane);
}

std::shared_ptr<const StepResult> ParameterStore::Pull(const WorkerId& w, int64_t step,
                                                       Clock::time_point deadline, int bucket) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  GP_REFUSE(FailedPrecondition, Reason::kNotInitialized, model_.initialized,
            "the server has no weights yet");
  if (opt_.async) return model_.AsyncWeights(step_);
  const Lane* lane = bucket >= 0 || agg_.size() == 1 ? &agg_.Of(bucket, w) : nullptr;
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
  std::lock_guard<std::mutex> lock(mu_);
  members_.DropSilent(Clock::now(), step_);
  MaybeFinalizeAll();  // a drop, or the registration grace ending, may complete the open step
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
  return s;
}

std::string StoreStats::Prometheus() const {
  std::ostringstream os;
  os << "# TYPE gradpress_steps_total counter\ngradpress_steps_total " << steps << "\n"
     << "# TYPE gradpress_bytes_in_total counter\ngradpress_bytes_in_total " << bytes_in << "\n"
     << "# TYPE gradpress_bytes_out_total counter\ngradpress_bytes_out_total " << bytes_out
     << "\n# TYPE gradpress_live_workers gauge\ngradpress_live_workers " << live_workers << "\n"
     << "# TYPE gradpress_step_server_ms gauge\ngradpress_step_server_ms " << mean_server_ms
     << "\n# TYPE gradpress_duplicate_pushes_total counter\ngradpress_duplicate_pushes_total "
     << duplicates << "\n# TYPE gradpress_faults_injected_total counter\n"
     << "gradpress_faults_injected_total " << faults_injected << "\n"
     << "# TYPE gradpress_rejected_total counter\n";
  for (const auto& [reason, n] : rejected)
    os << "gradpress_rejected_total{reason=\"" << reason << "\"} " << n << "\n";
  return os.str();
}

}  // namespace gradpress::server
