// ParameterStore: the server's weights as a shared checkpoint of the job -- reading them, and
// method 6's per-epoch election of the best worker, who then publishes its weights for
// everyone to adopt. Weights are copied as a reader and replaced as the writer of the
// model's keys (server/key_holds.h), without the store's lock.
#include <spdlog/spdlog.h>

#include <cmath>

#include "common/error.h"
#include "server/parameter_store.h"

namespace gradpress::server {

std::shared_ptr<const StepResult> ParameterStore::Weights(const WorkerId& w, int64_t min_version,
                                                          Clock::time_point deadline,
                                                          bool wait_init) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  if (wait_init && !model_.initialized) {  // a worker that offers none waits for the root's
    ++weights_waiting_;
    step_cv_.wait_until(lock, deadline, [&] { return shutdown_ || model_.initialized; });
    --weights_waiting_;
    GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
    GP_REFUSE(Unavailable, Reason::kTimedOut, model_.initialized, "worker '", w.name,
              "': no worker has offered the initial weights yet (the root rank's); retry");
  }
  GP_REFUSE(FailedPrecondition, Reason::kNotInitialized, model_.initialized,
            "the server has no weights yet");
  step_cv_.wait_until(lock, deadline,
                      [&] { return shutdown_ || model_.weights_version >= min_version; });
  GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
  GP_REFUSE(Unavailable, Reason::kTimedOut, model_.weights_version >= min_version,
            "weights version ", min_version, " not published yet (now ", model_.weights_version,
            "); retry");
  KeyHold hold(&holds_, &lock, &step_cv_, KeyHolds::kRead);  // no finalize steps them meanwhile
  const int64_t step = step_;
  std::shared_ptr<const StepResult> r;
  Unlocked(&lock, [&] {
    r = model_.Encode(step, /*weights=*/true, /*lossless=*/true, 0, model_.size(), 1.f, nullptr);
  });
  return r;
}

std::shared_ptr<const StepResult> ParameterStore::ShadowMomentum(const WorkerId& w) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  GP_REFUSE(FailedPrecondition, Reason::kNotInitialized,
            opt_.shadow_weights && opt_.shadow_sgd.momentum != 0,
            "the server keeps no optimizer momentum (server.shadow_weights with a momentum, "
            "sync gradient methods with sync.every 1)");
  GP_REFUSE(FailedPrecondition, Reason::kNotInitialized, model_.initialized,
            "the server has no weights yet");
  KeyHold hold(&holds_, &lock, &step_cv_, KeyHolds::kRead);  // no finalize steps them meanwhile
  const int64_t step = step_;
  std::shared_ptr<StepResult> r;
  Unlocked(&lock, [&] { r = model_.EncodeMomentum(step); });
  GP_REFUSE(FailedPrecondition, Reason::kNotInitialized, r != nullptr,
            "the server's shadow weights have taken no step yet (no momentum)");
  return r;
}

std::pair<int, double> ParameterStore::Elect(const WorkerId& w, int64_t round, double score,
                                             Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  GP_ENFORCE(std::isfinite(score), "worker '", w.name, "': election score must be finite");
  elections_.Vote(round, w.name, score);
  if (elections_.Complete(members_)) step_cv_.notify_all();
  const Elections::Round* e = nullptr;
  step_cv_.wait_until(lock, deadline, [&] {
    e = elections_.Find(round);
    return shutdown_ || e == nullptr || e->best_rank >= 0;
  });
  GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
  e = elections_.Find(round);
  GP_REFUSE(FailedPrecondition, Reason::kResultDropped, e != nullptr, "election ", round,
            " is no longer kept");
  GP_REFUSE(Unavailable, Reason::kTimedOut, e->best_rank >= 0, "timed out waiting for the other ",
            "workers' votes in election ", round, "; retry");
  return {e->best_rank, e->best_score};
}

void ParameterStore::PublishWeights(const WorkerId& w, int64_t round,
                                    const std::vector<KeyPayload>& weights) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Member& m = CheckWorker(w);
    // Sharded servers hold the election on shard 0 (ranks are per shard); the other shards
    // take the round's first publication from a registered worker.
    if (opt_.shard == 0) {
      const Elections::Round* e = elections_.Find(round);
      GP_REFUSE(FailedPrecondition, Reason::kNotElected, e != nullptr && e->best_rank == m.rank,
                "worker '", w.name, "' was not elected in round ", round,
                " and may not publish weights");
    }
    if (model_.weights_version >= round + 1) return;  // a retry: this round's weights are in
  }
  const auto ordered = model_.Validate(weights, Rejecter());  // the checks of a push
  std::unique_lock<std::mutex> lock(mu_);
  KeyHold hold(&holds_, &lock, &step_cv_, KeyHolds::kWrite);  // decoded without mu_
  if (model_.weights_version >= round + 1) return;  // a retry published them while we waited
  Unlocked(&lock, [&] { model_.DecodeWeights(ordered); });
  model_.weights_version = std::max(model_.weights_version, round + 1);
  step_cv_.notify_all();
}

}  // namespace gradpress::server
