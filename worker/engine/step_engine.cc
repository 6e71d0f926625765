// StepEngine (step_engine.h): the connect sequence, clipping and the push codec's policy
// around the method's Exchange.
#include "worker/engine/step_engine.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>

#include "common/error.h"
#include "common/timer.h"
#include "compressors/compressor_config.h"
#include "compressors/registry.h"
#include "worker/engine/auto_codecs.h"

namespace gradpress::worker {

StepEngine::StepEngine(EngineOptions options, WorkerClient client)
    : opt_(std::move(options)), client_(std::move(client)) {
  const Config& c = *opt_.config;
  GP_ENFORCE(opt_.params && opt_.names.size() == opt_.params->size(), opt_.names.size(),
             " key names for ", opt_.params ? opt_.params->size() : 0, " parameters");
  exchange_ = MakeExchange({opt_.config, opt_.rank, client_.client.get(), opt_.params,
                            opt_.optimizer, opt_.register_hooks});
  if (!opt_.register_hooks) feed_ = dynamic_cast<GradientFeed*>(exchange_.get());
  if (!c.compress.dynamic.ladder.empty()) {
    controller_ = std::make_unique<CompressionController>(c.compress.dynamic);
    for (const auto& spec : SplitLadder(c.compress.dynamic.ladder))
      compressors::MakeCompressor(ParseCodecShorthand(spec));  // all valid now
  }
  // The config's rules make sure the push codec has a ratio (common/config_rules.cc).
  if (c.compress.warmup_epochs > 0) push_ratio_ = std::stod(c.push.params.at("ratio"));
}

StepEngine::~StepEngine() = default;

Connection StepEngine::Connect(std::optional<int64_t> restored_step, std::optional<int> root_rank) {
  GP_ENFORCE(!root_rank || (*root_rank >= 0 && *root_rank < opt_.workers), "root_rank ",
             root_rank.value_or(0), " is outside the job's ranks [0, ", opt_.workers, ")");
  // Before registering: the calibration's batches keep no server waiting for this worker.
  if (opt_.config->compress.auto_select && auto_push_.empty()) ChooseCodecs();
  std::vector<compressors::TensorSpec> specs;
  for (size_t i = 0; i < opt_.params->size(); ++i)
    specs.push_back({opt_.names[i], exchange_->KeyShape((*opt_.params)[i])});
  pending_.reset();  // a step the server has forgotten (rejoin) is not applied
  Connection out;
  out.info = client_.client->Register(specs, exchange_->traits().bucket_keys);
  server_rank_ = out.info.rank;
  const int64_t server_step = out.info.server_step;
  // A restarted worker's own weights of the server's step are the job's (gradient methods:
  // every worker holds them); the server's are taken otherwise.
  out.kept_own = restored_step && *restored_step == server_step && server_step > 0 &&
                 traits().server_weights != ExchangeTraits::ServerWeights::kModel &&
                 !traits().stats_keys;
  if (out.kept_own) {
    spdlog::info("worker-{}: rejoins at step {} with the weights of its own checkpoint", opt_.rank,
                 server_step);
  } else {
    // The first worker's weights win (or the root's, which alone offers); all adopt them.
    out.ours = exchange_->Init(/*offer=*/!root_rank || *root_rank == opt_.rank);
    if (restored_step && server_step > 0)
      spdlog::warn(
          "worker-{}: its state is of step {}, the server is at step {}: it goes on from the "
          "server's weights with the optimizer state of step {}",
          opt_.rank, *restored_step, server_step, *restored_step);
  }
  if (controller_) SetPushCodec(controller_->current(), /*epoch=*/-1);
  if (!auto_push_.empty()) client_.codecs->SetKeyPushCodecs(auto_push_);
  // A worker joining a running job goes on at the server's step.
  step_ = exchange_->Reset(server_step);
  return out;
}

void StepEngine::BeginStep(double lr, std::vector<double> key_lr) {
  GP_ENFORCE(!pending_, "StepEngine::BeginStep while step ", step_ - 1,
             "'s results are pending: Settle first");
  GP_ENFORCE(key_lr.empty() || key_lr.size() == opt_.params->size(), key_lr.size(),
             " per-key learning rates for ", opt_.params->size(), " parameters");
  for (double k : key_lr)
    GP_ENFORCE(std::isfinite(k) && k >= 0, "a per-key learning rate of ", k,
               " is not a finite number >= 0");
  exchange_->Prepare(step_, lr, std::move(key_lr));
}

void StepEngine::GateLayer(const torch::nn::Module& layer) {
  if (!pending_) return;
  SettledStep unused;
  try {
    pending_->Settle(&layer, &unused);
  } catch (...) {
    pending_.reset();
    throw;
  }
}

bool StepEngine::Settle(SettledStep* done) {
  if (!pending_) return false;
  std::unique_ptr<PendingStep> pending = std::move(pending_);
  return pending->Settle(nullptr, done);
}

void StepEngine::Reset(int64_t server_step) {
  pending_.reset();
  step_ = exchange_->Reset(server_step);
}

void StepEngine::AdoptServerWeights(int64_t server_step) {
  std::vector<torch::Tensor> weights = DetachedAliases(*opt_.params);
  client_.client->PullWeights(&weights);
  AdoptServerMomentum();
  Reset(server_step);  // method 6: the anchor is the server's weights
}

void StepEngine::AdoptServerMomentum() {
  const Config& c = *opt_.config;
  auto* sgd = dynamic_cast<torch::optim::SGD*>(opt_.optimizer);
  if (sgd == nullptr || c.sync.every != 1 || c.compress.momentum_correction > 0) return;
  for (auto& group : sgd->param_groups())
    if (static_cast<torch::optim::SGDOptions&>(group.options()).momentum() == 0) return;
  std::vector<torch::Tensor> buffers;
  for (const auto& p : *opt_.params) buffers.push_back(torch::empty_like(p).contiguous());
  try {
    client_.client->PullMomentum(&buffers);
  } catch (const Error& e) {
    if (e.reason() != Reason::kNotInitialized) throw;
    spdlog::warn("worker-{}: keeps its own optimizer momentum ({})", opt_.rank, e.what());
    return;
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    auto state = std::make_unique<torch::optim::SGDParamState>();
    state->momentum_buffer(buffers[i]);
    sgd->state()[c10::guts::to_string((*opt_.params)[i].unsafeGetTensorImpl())] = std::move(state);
  }
  spdlog::info("worker-{}: took the server's optimizer momentum with its weights", opt_.rank);
}

void StepEngine::Gradient(size_t key, const torch::Tensor& grad) {
  GP_ENFORCE(feeds(), "StepEngine::Gradient: this step takes its gradients from p.grad");
  feed_->Gradient(key, grad);
}

void StepEngine::PrepareGradients(StepMetrics* m) {
  if (prepared_) return;
  const Config& c = *opt_.config;
  Timer local;
  for (auto& p : *opt_.params)
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  if (c.compress.clip_norm > 0)  // DGC's local clipping: N^(-1/2) of the threshold
    torch::nn::utils::clip_grad_norm_(*opt_.params, c.compress.clip_norm / std::sqrt(opt_.workers));
  m->compute_ms += local.ElapsedMs();
  prepared_ = true;
}

void StepEngine::FinishStep(StepMetrics* m) {
  PrepareGradients(m);
  prepared_ = false;
  Timer exchange;
  const double compute_before = m->compute_ms;
  pending_ = exchange_->Finish(step_, m);
  // The serial step waits for the whole exchange (its wall time, less local compute in it).
  if (!m->overlap) m->exposed_comm_ms = exchange.ElapsedMs() - (m->compute_ms - compute_before);
  ++step_;
}

void StepEngine::StartEpoch(int64_t epoch) {
  const Config& c = *opt_.config;
  if (c.compress.warmup_epochs <= 0) return;
  const double density = WarmupDensity(push_ratio_, c.compress.warmup_epochs, epoch);
  GP_ENFORCE(client_.codecs->SetPushDensity(density), "compress.warmup_epochs: push codec '",
             c.push.codec, "' has no density to warm up");
  if (epoch > c.compress.warmup_epochs) return;
  spdlog::info("worker-{} epoch {}: push density {:.6g} (sparsity warm-up)", opt_.rank, epoch,
               density);
  if (opt_.log) opt_.log->Density(epoch, step_, density);
}

double StepEngine::EndEpoch(int64_t epoch, const std::function<double()>& evaluate,
                            const std::function<double()>& probe_loss, bool adapt, StepMetrics* m) {
  const double acc = exchange_->EndEpoch(epoch, evaluate, server_rank_, m);
  if (controller_ && adapt) {
    const CompressionDecision d = controller_->Update(acc, probe_loss());
    if (d.changed) SetPushCodec(d, epoch);
  }
  return acc;
}

void StepEngine::Restore(int64_t step, int64_t server_step, int64_t since_exchange) {
  step_ = step;
  exchange_->Restore(server_step, since_exchange);
}

void StepEngine::SetAutoCodecs(std::vector<CodecSpec> per_key) {
  client_.codecs->SetKeyPushCodecs(per_key);
  auto_push_ = std::move(per_key);
}

void StepEngine::ChooseCodecs() {
  KeyCalibration calibration;
  const AutoChoice a =
      ChooseKeyCodecs(*opt_.config, AutoCluster(*opt_.config), /*steps=*/3, &calibration);
  // The calibration trains the job's model (config `model`): its keys must be this model's.
  const auto& params = *opt_.params;
  GP_ENFORCE(a.push.size() == params.size(), "compress.auto calibrates the job's model (config ",
             "`model`: ", opt_.config->model, "), which has ", a.push.size(),
             " parameters; this model has ", params.size(),
             ": set `model` to this model (a TorchScript file: model: {name: torchscript, path: "
             "...})");
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t dense = calibration.cost[0][i].dense_bytes;
    GP_ENFORCE(dense == params[i].numel() * 4, "compress.auto calibrates the job's model (config ",
               "`model`: ", opt_.config->model, "): its key ", i, " '", calibration.names[i],
               "' has ", dense / 4, " elements, this model's '", opt_.names[i], "' ",
               params[i].numel(), ": set `model` to this model (a TorchScript file)");
  }
  for (const std::string& line : a.Describe(calibration))
    spdlog::info("worker-{} {}", opt_.rank, line);
  auto_push_ = a.push;
}

void StepEngine::SetPushCodec(const CompressionDecision& d, int64_t epoch) {
  GP_ENFORCE(!pending_, "the push codec changes between steps, not with step ", step_ - 1,
             " in flight");
  client_.codecs->SetPushCodec(d.spec == "none" ? CodecSpec{} : ParseCodecShorthand(d.spec));
  if (epoch < 0) {
    spdlog::info("worker-{} push codec: {} (dynamic compression, rung {})", opt_.rank, d.spec,
                 d.rung);
    return;
  }
  spdlog::info("worker-{} epoch {}: push codec -> {} ({})", opt_.rank, epoch, d.spec, d.reason);
  if (opt_.log) opt_.log->CodecChange(epoch, step_, d.spec, d.rung, d.reason);
}

}  // namespace gradpress::worker
