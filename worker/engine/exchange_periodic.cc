// Method 6 (exchange.h): local steps on the worker's own gradients; every sync.every steps
// the update since the last sync (anchor - weights) is averaged through the server and
// applied to the anchor by every worker alike. Each epoch ends with the survey's rule
// (sync.model_selection best: every worker adopts the weights of the worker with the best
// test accuracy, via Elect + PublishWeights/PullWeights) or a final averaging sync (average).
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "common/timer.h"
#include "worker/engine/exchange.h"

namespace gradpress::worker {
namespace {

// Its counters are the base's (counters_: syncs done = the server's step, local steps since
// the last sync, the anchor), so checkpoints hold them.
class PeriodicExchange : public Exchange {
 public:
  // Local steps; the server averages: it takes no lr.
  explicit PeriodicExchange(ExchangeContext ctx)
      : Exchange(ctx, {/*stats_keys=*/false, {}, /*server_follows_lr=*/false}) {
    for (const auto& p : *ctx.params) received_.push_back(torch::zeros_like(p));
    counters_ = ExchangeState{};
  }
  int64_t Reset(int64_t server_step) override {
    counters_->server_step = server_step;  // the server counts syncs
    counters_->since_exchange = 0;
    counters_->tensors.clear();
    for (const auto& p : *ctx_.params) counters_->tensors.push_back(p.detach().clone());
    return server_step * ctx_.config->sync.every;
  }
  std::unique_ptr<PendingStep> Finish(int64_t step, StepMetrics* m) override {
    (void)step;
    Timer t;
    StepOptimizer();  // the worker's own gradient; the update is pushed at the next sync
    m->compute_ms += t.ElapsedMs();
    if (++counters_->since_exchange >= ctx_.config->sync.every)
      Merge(Sync(), Concurrency::kSerial, m);
    return nullptr;
  }
  double EndEpoch(int64_t epoch, const std::function<double()>& evaluate, int server_rank,
                  StepMetrics* m) override;

 private:
  StepMetrics Sync();
  std::vector<torch::Tensor>& anchor() { return counters_->tensors; }  // weights at the last sync

  std::vector<torch::Tensor> received_;
};

StepMetrics PeriodicExchange::Sync() {
  torch::NoGradGuard no_grad;
  auto& params = *ctx_.params;
  auto& anchor = this->anchor();
  // The update accumulated since the last sync; the server averages it over the workers.
  std::vector<torch::Tensor> update;
  for (size_t i = 0; i < params.size(); ++i) update.push_back(anchor[i] - params[i].detach());
  StepMetrics st = ctx_.client->PushPull(Call(counters_->server_step), update, &received_);
  for (size_t i = 0; i < params.size(); ++i) {
    anchor[i].sub_(received_[i]);  // every worker applies the same mean to the same anchor
    params[i].detach().copy_(anchor[i]);
  }
  ++counters_->server_step;
  counters_->since_exchange = 0;
  return st;
}

double PeriodicExchange::EndEpoch(int64_t epoch, const std::function<double()>& evaluate,
                                  int server_rank, StepMetrics* m) {
  if (ctx_.config->sync.model_selection == "average") {
    if (counters_->since_exchange > 0) Merge(Sync(), Concurrency::kSerial, m);
    return evaluate();
  }
  // The survey's rule: every worker adopts the weights of the worker with the best test
  // accuracy; the others' steps since the last sync are dropped.
  const double mine = evaluate();
  const auto [best_rank, best_acc] = ctx_.client->Elect(epoch, mine);
  {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> weights = Aliases();
    if (best_rank == server_rank) {
      ctx_.client->PublishWeights(epoch, weights);
    } else {
      ctx_.client->PullWeights(&weights, epoch + 1);
    }
    for (size_t i = 0; i < weights.size(); ++i) anchor()[i].copy_(weights[i]);
  }
  counters_->since_exchange = 0;
  spdlog::info("worker-{} epoch {}: own test_acc {:.4f}; adopted rank {}'s ({:.4f})", ctx_.rank,
               epoch, mine, best_rank, best_acc);
  return best_acc;
}

}  // namespace

std::unique_ptr<Exchange> MakePeriodicExchange(ExchangeContext ctx) {
  return std::make_unique<PeriodicExchange>(ctx);
}

}  // namespace gradpress::worker
