#include "worker/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
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
#include "compressors/compressor_config.h"
#include "compressors/registry.h"
#include "transport/fault_injection.h"
#include "worker/blas.h"
#include "worker/compression_schedule.h"
#include "worker/data/random.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/lr_schedule.h"
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
  client_ = MakeWorkerClient(c, co, params_, opt_.make_client);
  // A restarted shard met inside an exchange takes these weights (nothing of that step is
  // applied to its part: its call failed).
  if (client_.sharded) client_.sharded->set_weights_source([this] { return params_; });
  exchange_ =
      MakeExchange({&opt_.config, opt_.rank, client_.client.get(), &params_, optimizer_.get()});
  if (exchange_->traits().defers)
    model_->set_layer_gate(
        [ex = exchange_.get()](const torch::nn::Module& l) { ex->GateLayer(l); });
  if (!c.compress.dynamic.ladder.empty()) {
    controller_ = std::make_unique<CompressionController>(c.compress.dynamic);
    for (const auto& spec : SplitLadder(c.compress.dynamic.ladder))
      compressors::MakeCompressor(ParseCodecShorthand(spec));  // all valid now
  }
  if (c.compress.warmup_epochs > 0) push_ratio_ = std::stod(c.push.params.at("ratio"));
  rng_.seed(data::MixSeed(static_cast<uint64_t>(c.train.seed), opt_.rank));
  checkpoint_dir_ = opt_.checkpoint_dir;
  if (checkpoint_dir_.empty() && !opt_.run_dir.empty())
    checkpoint_dir_ = opt_.run_dir + "/ckpt/worker-" + std::to_string(opt_.rank);
}

Trainer::~Trainer() = default;

std::vector<torch::Tensor> Trainer::Parameters() {
  Settle();
  std::vector<torch::Tensor> out;
  for (const auto& p : params_) out.push_back(p.detach());
  return out;
}

void Trainer::Connect(bool resume) {
  if (connected_) return;
  // Before registering: the calibration's batches keep no server waiting for this worker.
  if (opt_.config.compress.auto_select && auto_push_.empty()) ChooseCodecs();
  std::vector<compressors::TensorSpec> specs;
  for (const auto& item : model_->named_parameters())
    specs.push_back({item.key(), exchange_->KeyShape(item.value())});
  RegisterInfo info = client_.client->Register(specs, exchange_->traits().bucket_keys);
  server_rank_ = info.rank;  // the server's numbering (registration order), used by Elect
  exchange_->Init();         // the first worker's weights win; every worker adopts them
  if (controller_) SetPushCodec(controller_->current(), /*epoch=*/-1);
  if (!auto_push_.empty()) client_.codecs->SetKeyPushCodecs(auto_push_);
  // A rejoining worker (server already past step 0) continues at the server's step.
  step_ = exchange_->Reset(info.server_step);
  connected_ = true;
  if (resume) Resume(info.server_step);
}

StepMetrics Trainer::Step(const torch::Tensor& images, const torch::Tensor& labels) {
  GP_ENFORCE(connected_, "Trainer::Step before Connect");
  Timer step_timer;
  StepMetrics m;
  m.step = step_;
  Timer t;
  model_->zero_grad(/*set_to_none=*/true);  // backward's gradients become p.grad as they are
  torch::Tensor x = images.to(device_), y = labels.to(device_);
  // Cross-barrier: the previous step's results are applied in the layers' gates as forward
  // reaches them (its waits and updates are that step's, not this one's compute).
  torch::Tensor logits = model_->forward(x);
  const double previous_ms = SettleHeld();
  // The step's lr, set once the previous step is applied (cross-barrier: just above).
  exchange_->SetLr(ScheduledLr(opt_.config.train, static_cast<double>(step_) / steps_per_epoch_));
  exchange_->Begin(step_);
  torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
  loss.backward();
  m.loss = loss.item<double>();
  m.correct = logits.argmax(1).eq(y).sum().item<int64_t>();
  for (auto& p : params_)
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  if (opt_.config.compress.clip_norm > 0)  // DGC's local clipping: N^(-1/2) of the threshold
    torch::nn::utils::clip_grad_norm_(params_,
                                      opt_.config.compress.clip_norm / std::sqrt(opt_.workers));
  m.compute_ms = t.ElapsedMs() - previous_ms;

  Timer exchange;
  const double compute_before = m.compute_ms;
  exchange_->Finish(step_, &m);
  // The serial step waits for the whole exchange (its wall time, less local compute in it).
  if (!m.overlap) m.exposed_comm_ms = exchange.ElapsedMs() - (m.compute_ms - compute_before);
  ++step_;
  m.step_ms = step_timer.ElapsedMs();
  if (exchange_->traits().defers)
    held_ = m;
  else
    finished_.push_back(m);
  return m;
}

double Trainer::SettleHeld() {
  SettledStep done;
  if (!exchange_->Settle(&done)) return 0;
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

}  // namespace gradpress::worker
