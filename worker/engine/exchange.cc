// The serial exchanges of methods 1-5 and gaussian, and MakeExchange (exchange.h); the
// pipelined step is pipelined_exchange.cc, method 6 exchange_periodic.cc.
#include "worker/engine/exchange.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <string>

#include "common/error.h"
#include "common/timer.h"
#include "worker/engine/bucket_scheduler.h"

namespace gradpress::worker {

Exchange::Exchange(ExchangeContext ctx, ExchangeTraits traits)
    : ctx_(ctx), traits_(std::move(traits)) {
  const Config& c = *ctx.config;
  if (c.sync.exchange == "weights")
    traits_.server_weights = ExchangeTraits::ServerWeights::kModel;
  else if (c.server.shadow_weights && c.sync.exchange == "gradients")
    traits_.server_weights = ExchangeTraits::ServerWeights::kShadow;
}

bool Exchange::Init(bool offer) {
  std::vector<torch::Tensor> weights;
  if (traits_.stats_keys) {
    // Gaussian: the server holds (mean, std) per key; every worker starts from the same
    // seeded init.
    for (size_t i = 0; i < ctx_.params->size(); ++i) weights.push_back(torch::zeros({2}));
  } else {
    weights = Aliases();  // the server's weights are written into them
  }
  if (offer) return ctx_.client->InitOrPull(&weights);
  ctx_.client->AwaitInitWeights(&weights);
  return false;
}

void Exchange::Prepare(int64_t step, double lr, std::vector<double> key_lr) {
  step_ = step;
  prepared_ = true;
  if (ctx_.optimizer) {
    for (auto& group : ctx_.optimizer->param_groups())
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
  }
  // Methods 1-2: the server's SGD steps with the schedule; 3-5: its shadow weights do.
  if (traits_.server_follows_lr) {
    server_lr_ = lr;
    server_key_lr_ = std::move(key_lr);  // no call of the previous step is in flight
  }
}

ExchangeState Exchange::State(int64_t step) const {
  return counters_ ? *counters_ : ExchangeState{step, 0, {}};
}

void Exchange::Restore(int64_t server_step, int64_t since_exchange) {
  if (!counters_) return;  // the local step is the server's: nothing else to restore
  counters_->server_step = server_step;
  counters_->since_exchange = since_exchange;
}

double Exchange::EndEpoch(int64_t epoch, const std::function<double()>& evaluate, int server_rank,
                          StepMetrics* m) {
  (void)epoch, (void)server_rank, (void)m;
  return evaluate();
}

std::vector<int64_t> Exchange::KeyShape(const torch::Tensor& p) const {
  return traits_.stats_keys ? std::vector<int64_t>{2} : p.sizes().vec();
}

StepCall Exchange::Call(int64_t step, int64_t base_step) const {
  StepCall c;
  c.step = step;
  c.base_step = base_step;
  c.lr = server_lr_;
  if (!server_key_lr_.empty()) c.key_lr = &server_key_lr_;
  return c;
}

std::vector<torch::Tensor> Exchange::ZerosLikeParams() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : *ctx_.params) out.push_back(torch::zeros_like(p));
  return out;
}

std::vector<torch::Tensor> Exchange::Aliases() const { return DetachedAliases(*ctx_.params); }

void WriteGradients(const std::vector<torch::Tensor>& params,
                    const std::vector<torch::Tensor>& received) {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    torch::Tensor& g = params[i].mutable_grad();
    const torch::Tensor& r = received[i];
    if (g.defined() && g.sizes() == r.sizes() && g.device() == r.device() &&
        g.scalar_type() == r.scalar_type())
      g.copy_(r);
    else
      g = r.clone();
  }
}

double Exchange::ApplyGradients(const std::vector<torch::Tensor>& received) {
  Timer t;
  WriteGradients(*ctx_.params, received);
  StepOptimizer();
  return t.ElapsedMs();
}

void Exchange::StepOptimizer() {
  if (ctx_.optimizer) ctx_.optimizer->step();
}

namespace {

// Each parameter's gradient; zeros for one that got none this step (an unused parameter).
std::vector<torch::Tensor> Grads(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> out;
  for (const auto& p : params) out.push_back(p.grad().defined() ? p.grad() : torch::zeros_like(p));
  return out;
}

// Methods 3-5, the serial step.
class GradientsExchange : public Exchange {
 public:
  explicit GradientsExchange(ExchangeContext ctx)
      : Exchange(ctx, {}), received_(ZerosLikeParams()) {}
  int64_t Reset(int64_t server_step) override { return server_step; }
  std::unique_ptr<PendingStep> Finish(int64_t step, StepMetrics* m) override {
    Merge(ctx_.client->PushPull(Call(step), Grads(*ctx_.params), &received_), Concurrency::kSerial,
          m);
    m->compute_ms += ApplyGradients(received_);
    return nullptr;
  }

 private:
  std::vector<torch::Tensor> received_;
};

// Methods 1-2, the serial step; sync or async.
class WeightsExchange : public Exchange {
 public:
  explicit WeightsExchange(ExchangeContext ctx) : Exchange(ctx, {}) {}
  int64_t Reset(int64_t server_step) override {
    base_step_ = server_step;
    // Async: the server counts every worker's pushes; a worker's own steps start at 0.
    return ctx_.config->sync.mode == "async" ? 0 : server_step;
  }
  std::unique_ptr<PendingStep> Finish(int64_t step, StepMetrics* m) override {
    std::vector<torch::Tensor> weights = Aliases();
    StepMetrics st;
    try {
      st = ctx_.client->PushPull(Call(step, base_step_), Grads(*ctx_.params), &weights);
    } catch (const FailedPrecondition& e) {
      // Async: a gradient older than sync.max_staleness steps is refused; drop it and go on
      // from the server's current weights (the usual asynchronous-SGD rule).
      if (ctx_.config->sync.mode != "async" || e.reason() != Reason::kStalePush) throw;
      spdlog::debug("worker-{} step {}: {}; pulling fresh weights", ctx_.rank, step, e.what());
      st = ctx_.client->Pull(&weights);
      m->stale = true;
    }
    base_step_ = st.server_step;  // async: the server step of the weights now held
    Merge(st, Concurrency::kSerial, m);
    return nullptr;
  }

 private:
  int64_t base_step_ = 0;  // async: server step of the weights we hold
};

// sync.exchange: gaussian: each key's (mean, std) goes up; the mean over workers comes back;
// the local gradient is standardised and rescaled to it: g' = (g - mean_i) / std_i * std + mean.
class GaussianExchange : public Exchange {
 public:
  // The server averages statistics: it takes no lr.
  explicit GaussianExchange(ExchangeContext ctx)
      : Exchange(ctx, {/*stats_keys=*/true, {}, /*server_follows_lr=*/false}) {}
  int64_t Reset(int64_t server_step) override { return server_step; }
  std::unique_ptr<PendingStep> Finish(int64_t step, StepMetrics* m) override {
    auto& params = *ctx_.params;
    std::vector<torch::Tensor> local(params.size()), global(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const torch::Tensor& grad = params[i].grad();
      torch::Tensor g = (grad.defined() ? grad.detach() : torch::zeros_like(params[i]))
                            .to(torch::kCPU, torch::kFloat64);
      const double mean = g.mean().item<double>();
      const double std = g.numel() > 1 ? g.std(/*unbiased=*/false).item<double>() : 0.0;
      local[i] = torch::tensor({static_cast<float>(mean), static_cast<float>(std)});
      global[i] = torch::zeros({2});
    }
    Merge(ctx_.client->PushPull(Call(step), local, &global), Concurrency::kSerial, m);
    Timer t;
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        const float mean_i = local[i][0].item<float>(), std_i = local[i][1].item<float>();
        const float mean = global[i][0].item<float>(), std = global[i][1].item<float>();
        torch::Tensor& g = params[i].mutable_grad();
        if (!g.defined()) g = torch::zeros_like(params[i]);
        if (std_i > 1e-12f)
          g.sub_(mean_i).mul_(std / std_i).add_(mean);
        else
          g.fill_(mean);
      }
    }
    StepOptimizer();
    m->compute_ms += t.ElapsedMs();
    return nullptr;
  }
};

}  // namespace

namespace {

// The method's serial step (one call of the whole model per step).
std::unique_ptr<Exchange> MakeSerialExchange(ExchangeContext ctx) {
  const Config& c = *ctx.config;
  if (c.sync.every > 1) return MakePeriodicExchange(ctx);
  if (c.sync.exchange == "gaussian") return std::make_unique<GaussianExchange>(ctx);
  if (c.sync.exchange == "weights") return std::make_unique<WeightsExchange>(ctx);
  return std::make_unique<GradientsExchange>(ctx);
}

}  // namespace

std::unique_ptr<Exchange> MakeExchange(ExchangeContext ctx) {
  const Config& c = *ctx.config;
  if (c.sync.every == 1 && c.sync.exchange != "gaussian" && c.sync.overlap &&
      c.sync.mode == "sync") {
    // One bucket cannot overlap anything (it is ready when backward ends): the serial step.
    std::vector<int> split = BucketScheduler::Split(*ctx.params, c.sync.bucket_mb);
    if (split.size() > 1) return MakePipelinedExchange(ctx, std::move(split));
  }
  return MakeSerialExchange(ctx);
}

}  // namespace gradpress::worker
