#include "worker/loop/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>

#include "common/config_schema.h"
#include "common/error.h"
#include "common/json_line.h"
#include "common/timer.h"
#include "worker/data/random.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/loop/lr_schedule.h"
#include "worker/models/blas.h"
#include "worker/models/model_factory.h"

namespace gradpress::worker {
namespace {

torch::Device PickDevice(const std::string& device) {
  if (device == "cuda" || (device == "auto" && torch::cuda::is_available()))
    return torch::Device(torch::kCUDA);
  return torch::Device(torch::kCPU);
}

}  // namespace

Trainer::Trainer(TrainerOptions options)
    : opt_(std::move(options)),
      device_(PickDevice(opt_.config.device)),
      rows_(std::make_shared<RowOutbox>()),
      files_(opt_.run_dir, opt_.rank, rows_) {
  const Config& c = opt_.config;
  GP_ENFORCE(opt_.workers >= 1 && opt_.rank >= 0 && opt_.rank < opt_.workers, "rank ", opt_.rank,
             " outside [0, ", opt_.workers, ")");
  detail::ValidateConfig(c);  // a Config built in code gets the checks a loaded one had
  SetComputeThreads(c.train.threads);

  data_ = opt_.data ? *opt_.data
                    : data::LoadDataset(c.dataset.name, c.dataset.path, c.dataset.subset,
                                        c.dataset.test_subset, static_cast<uint64_t>(c.train.seed));
  const int64_t shard = data::ShardSize(data_.train.size(), opt_.workers);
  steps_per_epoch_ = std::max<int64_t>(1, (shard + c.train.batch_size - 1) / c.train.batch_size);
  const int64_t channels = data_.train.images.size(1), size = data_.train.images.size(2);
  model_ = models::MakeJobModel(c.model, c.model_path, channels, size, data::kNumClasses,
                                static_cast<uint64_t>(c.train.seed));
  model_->to(device_);
  model_->train();
  for (const auto& p : model_->parameters()) {
    params_.push_back(p);
    dense_bytes_ += p.numel() * 4;
  }
  const bool dgc = c.compress.momentum_correction > 0;
  if (c.sync.exchange != "weights") {
    torch::optim::SGDOptions so(c.train.lr);
    // DGC: the momentum lives in the push codec (momentum correction); the averaged update is
    // applied with plain SGD.
    so.momentum(dgc ? 0.0 : c.train.momentum)
        .weight_decay(c.train.weight_decay)
        .nesterov(!dgc && c.train.nesterov);
    optimizer_ = std::make_unique<torch::optim::SGD>(params_, so);
  }
  ClientOptions co = ClientOptionsFor(c, opt_.rank, opt_.incarnation, opt_.server);
  co.rows = rows_;
  EngineOptions eo;
  eo.config = &opt_.config;
  eo.rank = opt_.rank;
  eo.workers = opt_.workers;
  eo.params = &params_;
  for (const auto& item : model_->named_parameters()) eo.names.push_back(item.key());
  eo.optimizer = optimizer_.get();
  eo.log = &files_;
  engine_ = std::make_unique<StepEngine>(std::move(eo),
                                         MakeWorkerClient(c, co, &params_, opt_.make_client));
  if (engine_->traits().defers)
    model_->set_layer_gate([e = engine_.get()](const torch::nn::Module& l) { e->GateLayer(l); });
  rng_.seed(data::MixSeed(static_cast<uint64_t>(c.train.seed), opt_.rank));
  checkpoint_dir_ = opt_.checkpoint_dir;
  if (checkpoint_dir_.empty() && !opt_.run_dir.empty())
    checkpoint_dir_ = opt_.run_dir + "/ckpt/worker-" + std::to_string(opt_.rank);
}

Trainer::~Trainer() = default;

std::vector<torch::Tensor> Trainer::Parameters() {
  Settle();
  return DetachedAliases(params_);
}

void Trainer::Connect(bool resume) {
  if (connected_) return;
  const Connection at = engine_->Connect();
  connected_ = true;
  if (resume) Resume(at.info.server_step);
}

StepMetrics Trainer::Step(const torch::Tensor& images, const torch::Tensor& labels) {
  GP_ENFORCE(connected_, "Trainer::Step before Connect");
  Timer step_timer;
  StepMetrics m;
  m.step = engine_->step();
  Timer t;
  model_->zero_grad(/*set_to_none=*/true);  // backward's gradients become p.grad as they are
  torch::Tensor x = images.to(device_), y = labels.to(device_);
  // Cross-barrier: the previous step's results are applied in the layers' gates as forward
  // reaches them (its waits and updates are that step's, not this one's compute).
  torch::Tensor logits = model_->forward(x);
  const double previous_ms = SettleHeld();
  // The step's lr, set once the previous step is applied (cross-barrier: just above).
  engine_->BeginStep(
      ScheduledLr(opt_.config.train, static_cast<double>(m.step) / steps_per_epoch_));
  torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
  loss.backward();
  m.loss = loss.item<double>();
  m.correct = logits.argmax(1).eq(y).sum().item<int64_t>();
  m.compute_ms = t.ElapsedMs() - previous_ms;
  engine_->FinishStep(&m);
  m.step_ms = step_timer.ElapsedMs();
  if (engine_->traits().defers)
    held_ = m;
  else
    finished_.push_back(m);
  return m;
}

double Trainer::SettleHeld() {
  SettledStep done;
  if (!engine_->Settle(&done)) return 0;
  if (held_) {
    Merge(done.stats, Concurrency::kSerial, &*held_);
    held_->exposed_comm_ms += done.exposed_ms;
    held_->compute_ms += done.apply_ms;
    finished_.push_back(*held_);
    held_.reset();
  }
  return done.exposed_ms + done.apply_ms;
}

void Trainer::Settle() { SettleHeld(); }

std::vector<StepMetrics> Trainer::TakeFinished() {
  std::vector<StepMetrics> out;
  out.swap(finished_);
  return out;
}

double Trainer::Evaluate() {
  Settle();
  torch::NoGradGuard no_grad;
  model_->eval();
  const data::Dataset& test = data_.test;
  int64_t correct = 0;
  const int64_t n = test.size(), batch = 256;
  for (int64_t b = 0; b < n; b += batch) {
    const int64_t e = std::min(n, b + batch);
    torch::Tensor logits = model_->forward(test.images.slice(0, b, e).to(device_));
    correct += logits.argmax(1).eq(test.labels.slice(0, b, e).to(device_)).sum().item<int64_t>();
  }
  model_->train();
  return n > 0 ? static_cast<double>(correct) / n : 0.0;
}

// The dynamic ladder's probe (step_engine.h): the same images on every worker.
double Trainer::ProbeTrainLoss(int64_t max_images) {
  Settle();
  torch::NoGradGuard no_grad;
  model_->eval();
  const data::Dataset& train = data_.train;
  const int64_t n = std::min(train.size(), max_images), batch = 256;
  double sum = 0;
  for (int64_t b = 0; b < n; b += batch) {
    const int64_t e = std::min(n, b + batch);
    torch::Tensor logits = model_->forward(train.images.slice(0, b, e).to(device_));
    sum += torch::nn::functional::cross_entropy(
               logits, train.labels.slice(0, b, e).to(device_),
               torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
               .item<double>();
  }
  model_->train();
  return n > 0 ? sum / n : 0.0;
}

}  // namespace gradpress::worker
