// Trainer, method 6: periodic synchronisation every sync.every steps and the per-epoch model
// selection of the survey (trainer.h).
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "worker/ps_client.h"
#include "worker/trainer.h"

namespace gradpress::worker {

StepStats Trainer::Sync() {
  torch::NoGradGuard no_grad;
  // The update accumulated since the last sync; the server averages it over the workers.
  std::vector<torch::Tensor> update;
  for (size_t i = 0; i < params_.size(); ++i) update.push_back(anchor_[i] - params_[i].detach());
  StepStats st = client_->PushPull(sync_round_, update, &received_);
  for (size_t i = 0; i < params_.size(); ++i) {
    anchor_[i].sub_(received_[i]);  // every worker applies the same mean to the same anchor
    params_[i].detach().copy_(anchor_[i]);
  }
  ++sync_round_;
  since_sync_ = 0;
  return st;
}

double Trainer::EndEpochPeriodic(int64_t epoch, double* bytes_up, double* bytes_down) {
  if (opt_.config.sync.model_selection == "average") {
    if (since_sync_ > 0) {
      const StepStats st = Sync();
      *bytes_up += st.bytes_up;
      *bytes_down += st.bytes_down;
    }
    return Evaluate();
  }
  // The survey's rule: every worker adopts the weights of the worker with the best test
  // accuracy; the others' steps since the last sync are dropped.
  const double mine = Evaluate();
  const auto [best_rank, best_acc] = client_->Elect(epoch, mine);
  {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> weights = Parameters();  // aliases of the parameters
    if (best_rank == server_rank_) {
      client_->PublishWeights(epoch, weights);
    } else {
      client_->PullWeights(&weights, epoch + 1);
    }
    for (size_t i = 0; i < params_.size(); ++i) anchor_[i].copy_(params_[i].detach());
  }
  since_sync_ = 0;
  spdlog::info("worker-{} epoch {}: own test_acc {:.4f}; adopted rank {}'s ({:.4f})", opt_.rank,
               epoch, mine, best_rank, best_acc);
  return best_acc;
}

}  // namespace gradpress::worker
