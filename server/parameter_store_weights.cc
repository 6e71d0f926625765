// ParameterStore, part three: the server's weights as a shared checkpoint of the job --
// reading them, and method 6's per-epoch election of the best worker, who then publishes
// its weights for everyone to adopt.
#include <spdlog/spdlog.h>

#include <cmath>

#include "common/error.h"
#include "server/parameter_store.h"

namespace gradpress::server {

std::shared_ptr<const StepResult> ParameterStore::Weights(const WorkerId& w, int64_t min_version,
                                                          Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  GP_ENFORCE_AS(FailedPrecondition, initialized_, "the server has no weights yet");
  step_cv_.wait_until(lock, deadline, [&] { return shutdown_ || weights_version_ >= min_version; });
  GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
  GP_ENFORCE_AS(Unavailable, weights_version_ >= min_version, "weights version ", min_version,
                " not published yet (now ", weights_version_, "); retry");
  return Encode(step_, /*weights=*/true, /*lossless=*/true, 0, keys_.size(), 1.f, nullptr);
}

std::pair<int, double> ParameterStore::Elect(const WorkerId& w, int64_t round, double score,
                                             Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  GP_ENFORCE(std::isfinite(score), "worker '", w.name, "': election score must be finite");
  Election& e = elections_[round];
  e.scores[w.name] = score;
  while (elections_.size() > 4) elections_.erase(elections_.begin());
  MaybeElect();
  step_cv_.wait_until(lock, deadline, [&] {
    auto it = elections_.find(round);
    return shutdown_ || it == elections_.end() || it->second.best_rank >= 0;
  });
  GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
  auto it = elections_.find(round);
  GP_ENFORCE_AS(FailedPrecondition, it != elections_.end(), "election ", round,
                " is no longer kept");
  GP_ENFORCE_AS(Unavailable, it->second.best_rank >= 0, "timed out waiting for the other ",
                "workers' votes in election ", round, "; retry");
  return {it->second.best_rank, it->second.best_score};
}

void ParameterStore::MaybeElect() {
  for (auto& [round, e] : elections_) {
    if (e.best_rank >= 0 || e.scores.empty()) continue;
    bool all = true;
    for (const auto& [name, ws] : workers_) all = all && (!ws.live || e.scores.count(name));
    if (!all) continue;
    for (const auto& [name, score] : e.scores) {
      const int rank = workers_.at(name).rank;
      if (e.best_rank < 0 || score > e.best_score ||
          (score == e.best_score && rank < e.best_rank)) {
        e.best_rank = rank;
        e.best_score = score;
      }
    }
    spdlog::info("election {}: worker rank {} is best with {:.4f} ({} votes)", round, e.best_rank,
                 e.best_score, e.scores.size());
    step_cv_.notify_all();
  }
}

void ParameterStore::PublishWeights(const WorkerId& w, int64_t round,
                                    const std::vector<KeyPayload>& weights) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    WorkerState& ws = CheckWorker(w);
    auto it = elections_.find(round);
    GP_ENFORCE_AS(FailedPrecondition, it != elections_.end() && it->second.best_rank == ws.rank,
                  "worker '", w.name, "' was not elected in round ", round,
                  " and may not publish weights");
    if (weights_version_ >= round + 1) return;  // a retry: this round's weights are in
  }
  const auto ordered = Validate(weights);
  std::lock_guard<std::mutex> lock(mu_);
  pool_.ParallelFor(static_cast<int64_t>(keys_.size()), [&](int64_t i) {
    Decoder(ordered[i]->codec)
        .DecodeTo(ordered[i]->bytes, keys_[i]->numel, keys_[i]->weights.data());
  });
  weights_version_ = std::max(weights_version_, round + 1);
  step_cv_.notify_all();
}

}  // namespace gradpress::server
