// Simulator, method 6: periodic synchronisation every sync.every steps and the per-epoch
// model selection, as worker/trainer_periodic.cc does it across processes (simulator.h).
#include <torch/torch.h>

#include "common/timer.h"
#include "sim/simulator.h"

namespace gradpress::sim {

void Simulator::Sync(std::vector<SimStepMetrics>* ms, double lr) {
  torch::NoGradGuard no_grad;
  for (int r = 0; r < opt_.workers; ++r) {
    // The update accumulated since the last sync; the store averages it over the workers.
    std::vector<torch::Tensor> update;
    for (size_t i = 0; i < specs_.size(); ++i)
      update.push_back(workers_[r]->anchor[i] - params_[r][i].detach());
    Push(r, sync_round_, update, lr, &(*ms)[r]);
  }
  uint64_t bytes_down = 0;
  double server_ms = 0;
  const double decode_ms = PullResult(sync_round_, &bytes_down, &server_ms);
  Timer t;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const torch::Tensor mean = received_[i].to(device_);
    for (int r = 0; r < opt_.workers; ++r) {
      workers_[r]->anchor[i].sub_(mean);  // every worker applies the same mean to its anchor
      params_[r][i].detach().copy_(workers_[r]->anchor[i]);
    }
  }
  const double apply_ms = t.ElapsedMs() / opt_.workers;
  for (auto& m : *ms) {
    m.bytes_down += bytes_down;
    m.decode_ms += decode_ms;
    m.server_ms += server_ms;
    m.compute_ms += apply_ms;
  }
  ++sync_round_;
  since_sync_ = 0;
}

double Simulator::EndEpochPeriodic(int64_t epoch, std::vector<double>* up,
                                   std::vector<double>* down) {
  (void)epoch;
  if (opt_.config.sync.model_selection == "average") {
    if (since_sync_ > 0) {
      std::vector<SimStepMetrics> ms(opt_.workers);
      Sync(&ms, 0.0);
      for (int r = 0; r < opt_.workers; ++r) {
        (*up)[r] += ms[r].bytes_up;
        (*down)[r] += ms[r].bytes_down;
      }
    }
    return Evaluate(0);  // every worker holds the same weights now
  }
  // The survey's rule: every worker adopts the weights of the worker with the best test
  // accuracy (ties to the lowest rank, as the store's Elect); the others' local steps since
  // the last sync are dropped. The weights travel losslessly, as PublishWeights does.
  int best = 0;
  double best_acc = -1;
  for (int r = 0; r < opt_.workers; ++r) {
    const double acc = Evaluate(r);
    if (acc > best_acc) best = r, best_acc = acc;
  }
  torch::NoGradGuard no_grad;
  for (int r = 0; r < opt_.workers; ++r) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      if (r != best) params_[r][i].detach().copy_(params_[best][i].detach());
      workers_[r]->anchor[i].copy_(params_[r][i].detach());
    }
  }
  since_sync_ = 0;
  return best_acc;
}

}  // namespace gradpress::sim
