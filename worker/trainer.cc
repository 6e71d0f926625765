#include "worker/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "common/error.h"
#include "common/json_line.h"
#include "common/timer.h"
#include "compressors/compressor_config.h"
#include "compressors/registry.h"
#include "transport/fault_injection.h"
#include "worker/compression_schedule.h"
#include "worker/data/random.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/lr_schedule.h"
#include "worker/models/model_factory.h"
#include "worker/ps_client.h"

namespace gradpress::worker {
namespace {

std::mutex& SeedMutex() {
  static std::mutex mu;
  return mu;
}

torch::Device PickDevice(const std::string& device) {
  if (device == "cuda" || (device == "auto" && torch::cuda::is_available()))
    return torch::Device(torch::kCUDA);
  return torch::Device(torch::kCPU);
}

}  // namespace

Trainer::Trainer(TrainerOptions options)
    : opt_(std::move(options)), device_(PickDevice(opt_.config.device)) {
  const Config& c = opt_.config;
  GP_ENFORCE(opt_.workers >= 1 && opt_.rank >= 0 && opt_.rank < opt_.workers, "rank ", opt_.rank,
             " outside [0, ", opt_.workers, ")");
  GP_ENFORCE(c.sync.mode == "sync" || (c.sync.exchange == "weights" && c.sync.every == 1),
             "sync.mode async applies each push to the server's weights at once: it needs "
             "sync.exchange: weights and sync.every: 1 (methods 1-2)");
  GP_ENFORCE(c.sync.every == 1 || c.sync.exchange == "gradients", "sync.every ", c.sync.every,
             " (method 6) needs sync.exchange: gradients");
  GP_ENFORCE(c.sync.exchange == "gradients" || c.sync.exchange == "weights" ||
                 c.sync.exchange == "gaussian",
             "sync.exchange: '", c.sync.exchange, "' is not one of gradients, weights, gaussian");
  GP_ENFORCE(c.train.batch_size >= 1, "train.batch_size must be >= 1");
  exchange_weights_ = c.sync.exchange == "weights";
  gaussian_ = c.sync.exchange == "gaussian";
  GP_ENFORCE(!gaussian_ || (c.sync.every == 1 && c.sync.mode == "sync"),
             "sync.exchange: gaussian runs in sync mode with sync.every: 1");
  const bool dgc = c.compress.momentum_correction > 0;
  GP_ENFORCE(!dgc || (c.sync.exchange == "gradients" && c.sync.every == 1),
             "compress.momentum_correction (DGC) needs sync.exchange: gradients and sync.every: 1");
  GP_ENFORCE(!dgc || !c.push.error_feedback,
             "compress.momentum_correction keeps the unsent remainder itself: set "
             "push.error_feedback: false");
  GP_ENFORCE(c.compress.dynamic.ladder.empty() || (!dgc && c.compress.warmup_epochs == 0),
             "compress.dynamic.ladder replaces the push codec: it does not combine with DGC's "
             "momentum correction or warm-up");
  torch::set_num_threads(std::max(1, c.train.threads));

  data_ = data::LoadDataset(c.dataset.name, c.dataset.path, c.dataset.subset, c.dataset.test_subset,
                            static_cast<uint64_t>(c.train.seed));
  const int64_t channels = data_.train.images.size(1), size = data_.train.images.size(2);
  {
    std::lock_guard<std::mutex> lock(SeedMutex());
    torch::manual_seed(c.train.seed);
    model_ = models::MakeModel(c.model, channels, size, data::kNumClasses);
  }
  model_->to(device_);
  model_->train();
  for (const auto& p : model_->parameters()) {
    params_.push_back(p);
    received_.push_back(torch::zeros_like(p));
    dense_bytes_ += p.numel() * 4;
  }
  if (!exchange_weights_) {
    torch::optim::SGDOptions so(c.train.lr);
    // DGC: the momentum lives in the push codec (momentum correction); the averaged update is
    // applied with plain SGD.
    so.momentum(dgc ? 0.0 : c.train.momentum)
        .weight_decay(c.train.weight_decay)
        .nesterov(!dgc && c.train.nesterov);
    optimizer_ = std::make_unique<torch::optim::SGD>(params_, so);
  }

  ClientOptions co;
  co.server = opt_.server.empty() ? c.cluster.server : opt_.server;
  co.worker_id = "worker-" + std::to_string(opt_.rank);
  co.incarnation = opt_.incarnation;
  co.config_hash = ConfigHash(c);
  co.push = compressors::FromCodecSpec(c.push);
  co.min_numel = c.compress.min_numel;
  co.skip_1d = c.compress.skip_1d;
  co.momentum_correction = c.compress.momentum_correction;
  co.deadline_s = c.server.deadline_s;
  co.heartbeat_s = c.server.worker_timeout_s / 4;
  co.security = c.security;                        // $GRADPRESS_TOKEN is read by the client
  co.faults = transport::ResolveFaults(c.faults);  // $GRADPRESS_FAULTS overrides the config
  client_ = std::make_unique<PsClient>(co);
  if (c.sync.overlap && c.sync.mode == "sync" && c.sync.every == 1 && !gaussian_) {
    bucket_keys_ = BucketExchange::Split(params_, c.sync.bucket_mb);
    if (bucket_keys_.size() == 1) bucket_keys_.clear();  // one bucket: the whole model
    const int buckets = std::max<int>(1, bucket_keys_.size());
    buckets_ = std::make_unique<BucketExchange>(
        client_.get(),
        bucket_keys_.empty() ? std::vector<int>{static_cast<int>(params_.size())} : bucket_keys_,
        std::min(8, buckets));
    // DGC's clipping needs every gradient first: its buckets go out after backward.
    hooks_ = c.compress.clip_norm <= 0;
    if (hooks_) {
      for (size_t i = 0; i < params_.size(); ++i) {
        BucketExchange* ex = buckets_.get();
        params_[i].register_hook([ex, i](const torch::Tensor& g) { ex->Gradient(i, g); });
      }
    }
  }
  if (!c.compress.dynamic.ladder.empty()) {
    controller_ = std::make_unique<CompressionController>(c.compress.dynamic);
    for (const auto& spec : SplitLadder(c.compress.dynamic.ladder))
      compressors::MakeCompressor(compressors::ParseCompressorSpec(spec));  // all valid now
  }
  if (c.compress.warmup_epochs > 0) {
    const auto ratio = c.push.params.find("ratio");
    GP_ENFORCE(ratio != c.push.params.end(), "compress.warmup_epochs needs push.ratio (the ",
               "density the warm-up ends at)");
    push_ratio_ = std::stod(ratio->second);
  }
  rng_.seed(data::MixSeed(static_cast<uint64_t>(c.train.seed), opt_.rank));
  checkpoint_dir_ = opt_.checkpoint_dir;
  if (checkpoint_dir_.empty() && !opt_.run_dir.empty())
    checkpoint_dir_ = opt_.run_dir + "/ckpt/worker-" + std::to_string(opt_.rank);
}

Trainer::~Trainer() = default;

std::vector<torch::Tensor> Trainer::Parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : params_) out.push_back(p.detach());
  return out;
}

void Trainer::Connect(bool resume) {
  if (connected_) return;
  std::vector<compressors::TensorSpec> specs;
  for (const auto& item : model_->named_parameters())
    specs.push_back({item.key(), gaussian_ ? std::vector<int64_t>{2} : item.value().sizes().vec()});
  RegisterInfo info = client_->Register(specs, bucket_keys_);
  server_rank_ = info.rank;  // the server's numbering (registration order), used by Elect
  if (gaussian_) {
    // The server holds (mean, std) per key; every worker starts from the same seeded init.
    stats_.assign(params_.size(), torch::Tensor());
    for (auto& t : stats_) t = torch::zeros({2});
    std::vector<torch::Tensor> init = stats_;
    client_->InitOrPull(&init);
  } else {
    std::vector<torch::Tensor> weights = Parameters();  // aliases: InitOrPull writes into them
    client_->InitOrPull(&weights);
  }
  if (controller_) SetPushCodec(controller_->current(), /*epoch=*/-1);
  // A rejoining worker (server already past step 0) continues at the server's step (for
  // method 6 the server counts syncs, every sync.every local steps). In async mode the
  // server counts every worker's pushes: a worker's own steps start at 0.
  const bool async = opt_.config.sync.mode == "async";
  sync_round_ = async ? 0 : info.server_step;
  base_step_ = info.server_step;
  step_ = sync_round_ * opt_.config.sync.every;
  anchor_.clear();
  for (const auto& p : params_) anchor_.push_back(p.detach().clone());
  connected_ = true;
  if (resume) Resume(info.server_step);
}

void Trainer::ApplyLr(double lr) {
  for (auto& group : optimizer_->param_groups())
    static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
}

StepMetrics Trainer::Step(const torch::Tensor& images, const torch::Tensor& labels) {
  GP_ENFORCE(connected_, "Trainer::Step before Connect");
  Timer step_timer;
  StepMetrics m;
  m.step = step_;
  Timer t;
  model_->zero_grad(/*set_to_none=*/true);  // backward's gradients become p.grad as they are
  torch::Tensor x = images.to(device_), y = labels.to(device_);
  if (pipelined()) {
    // Fresh aliases each step: restoring a checkpoint may give the parameters new storage.
    if (exchange_weights_) weights_out_ = Parameters();
    buckets_->Begin(step_, exchange_weights_ ? &weights_out_ : &received_);
  }
  torch::Tensor logits = model_->forward(x);
  torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
  loss.backward();
  m.loss = loss.item<double>();
  m.correct = logits.argmax(1).eq(y).sum().item<int64_t>();
  std::vector<torch::Tensor> grads;
  for (auto& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  if (opt_.config.compress.clip_norm > 0)  // DGC's local clipping: N^(-1/2) of the threshold
    torch::nn::utils::clip_grad_norm_(params_,
                                      opt_.config.compress.clip_norm / std::sqrt(opt_.workers));
  m.compute_ms = t.ElapsedMs();

  StepStats st;
  Timer exchange;
  const double compute_before = m.compute_ms;
  if (pipelined()) {
    st = ExchangeBuckets(&m);
  } else if (periodic()) {
    t.Restart();
    optimizer_->step();  // the worker's own gradient; the update is pushed at the next sync
    m.compute_ms += t.ElapsedMs();
    if (++since_sync_ == opt_.config.sync.every) st = Sync();
  } else if (gaussian_) {
    st = ExchangeGaussian(grads);
    t.Restart();
    optimizer_->step();
    m.compute_ms += t.ElapsedMs();
  } else if (exchange_weights_) {
    std::vector<torch::Tensor> weights = Parameters();
    try {
      st = client_->PushPull(step_, grads, &weights, base_step_);
    } catch (const FailedPrecondition& e) {
      // Async: a gradient older than sync.max_staleness steps is refused; drop it and go on
      // from the server's current weights (the usual asynchronous-SGD rule).
      if (opt_.config.sync.mode != "async" ||
          std::string(e.what()).find("steps stale") == std::string::npos)
        throw;
      spdlog::debug("worker-{} step {}: {}; pulling fresh weights", opt_.rank, step_, e.what());
      st = client_->Pull(&weights);
      m.stale = true;
    }
    base_step_ = st.server_step;  // async: the server step of the weights now held
  } else {
    st = client_->PushPull(step_, grads, &received_);
    t.Restart();
    for (size_t i = 0; i < params_.size(); ++i) params_[i].mutable_grad().copy_(received_[i]);
    optimizer_->step();
    m.compute_ms += t.ElapsedMs();
  }
  m.bytes_up = st.bytes_up;
  m.bytes_down = st.bytes_down;
  m.encode_ms = st.encode_ms;
  m.decode_ms = st.decode_ms;
  m.network_ms = st.network_ms;
  m.wait_ms = st.wait_ms;
  m.retries = st.retries;
  // The serial step waits for the whole exchange (its wall time, less local compute in it).
  if (!pipelined()) m.exposed_comm_ms = exchange.ElapsedMs() - (m.compute_ms - compute_before);
  ++step_;
  m.step_ms = step_timer.ElapsedMs();
  return m;
}

StepStats Trainer::ExchangeBuckets(StepMetrics* m) {
  m->overlap = true;
  if (!hooks_) {  // after clipping: every bucket at once, in backward's order
    for (size_t i = params_.size(); i-- > 0;) buckets_->Gradient(i, params_[i].grad());
  }
  StepStats st = buckets_->Finish(params_, &m->exposed_comm_ms);
  Timer t;
  if (exchange_weights_) {
    base_step_ = st.server_step;  // the weights were written into the parameters in place
  } else {
    for (size_t i = 0; i < params_.size(); ++i) params_[i].mutable_grad().copy_(received_[i]);
    optimizer_->step();
  }
  m->compute_ms += t.ElapsedMs();
  return st;
}

double Trainer::Evaluate() {
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

void Trainer::AppendLine(const std::string& line) {
  if (opt_.run_dir.empty()) return;
  std::ofstream f(opt_.run_dir + "/metrics.jsonl", std::ios::app);
  f << line + "\n";
  f.flush();
}

TrainSummary Trainer::Run() {
  const Config& c = opt_.config;
  Timer wall;
  if (!opt_.run_dir.empty()) std::filesystem::create_directories(opt_.run_dir);
  Connect();
  const int64_t n = data_.train.size();
  const int64_t shard = data::ShardSize(n, opt_.workers);
  const int64_t batch = c.train.batch_size;
  const int64_t steps_per_epoch = std::max<int64_t>(1, (shard + batch - 1) / batch);
  const bool augment = c.dataset.name == "cifar10";

  TrainSummary s;
  double sum_up = 0, sum_down = 0;
  Timer since_log;
  int64_t log_images = 0;
  int64_t done = 0;
  // Resume position: a worker that joined late starts at the server's step.
  for (int64_t epoch = step_ / steps_per_epoch; epoch < c.train.epochs; ++epoch) {
    Timer epoch_timer;
    const std::vector<int64_t> idx =
        data::EpochIndices(n, opt_.rank, opt_.workers, epoch, static_cast<uint64_t>(c.train.seed));
    int64_t correct = 0, seen = 0;
    bool stop = false, rejoined = false;
    if (c.compress.warmup_epochs > 0) {
      const double density = WarmupDensity(push_ratio_, c.compress.warmup_epochs, epoch);
      GP_ENFORCE(client_->SetPushDensity(density), "compress.warmup_epochs: push codec '",
                 c.push.codec, "' has no density to warm up");
      if (epoch <= c.compress.warmup_epochs) {
        spdlog::info("worker-{} epoch {}: push density {:.6g} (sparsity warm-up)", opt_.rank, epoch,
                     density);
        AppendLine(JsonLine()
                       .Int("rank", opt_.rank)
                       .Int("epoch", epoch)
                       .Int("step", step_)
                       .Num("push_density", density)
                       .Done());
      }
    }
    // The next batch is gathered and augmented on another thread while a step runs; it
    // draws from a copy of the RNG, adopted when the batch is used, so checkpoints (taken
    // between steps) hold the RNG of the step they are at.
    struct Batch {
      torch::Tensor images, labels;
      int64_t size = 0;
      std::mt19937_64 rng;
    };
    auto load = [&](int64_t i, std::mt19937_64 rng) {
      data::Dataset d = data::GatherBatch(data_.train, idx, i * batch, (i + 1) * batch);
      Batch out{augment ? data::AugmentCifar(d.images, &rng) : d.images, d.labels, d.size(), rng};
      return out;
    };
    std::future<Batch> next;
    for (int64_t i = step_ - epoch * steps_per_epoch; i < steps_per_epoch; ++i) {
      if ((opt_.max_steps > 0 && done >= opt_.max_steps) || (opt_.stop && opt_.stop->load())) {
        stop = true;
        break;
      }
      const double lr = ScheduledLr(c.train, static_cast<double>(step_) / steps_per_epoch);
      // Methods 1-2: the server's SGD steps with the schedule; 3-5: its shadow weights do.
      if (!periodic() && !gaussian_) client_->set_server_lr(lr);
      if (!exchange_weights_) ApplyLr(lr);
      Batch b = next.valid() ? next.get() : load(i, rng_);
      rng_ = b.rng;  // the augmentation RNG after this batch (checkpointed with the step)
      if (i + 1 < steps_per_epoch) next = std::async(std::launch::async, load, i + 1, rng_);
      StepMetrics m;
      try {
        m = Step(b.images, b.labels);
      } catch (const Error& e) {
        if (!LostByServer(e)) throw;
        const int64_t lost = Rejoin(e);
        if (lost < 0) throw;
        done = std::max<int64_t>(0, done - lost);  // max_steps counts the steps kept
        ++s.rejoins;
        rejoined = true;
        break;
      }
      correct += m.correct;
      seen += b.size;
      ++done;
      const bool exchanged = !periodic() || since_sync_ == 0;
      if (c.train.checkpoint_every > 0 && exchanged &&
          server_step() % c.train.checkpoint_every == 0)
        WriteCheckpoint();
      sum_up += m.bytes_up;
      sum_down += m.bytes_down;
      s.step_ms += m.step_ms;
      s.compute_ms += m.compute_ms;
      s.encode_ms += m.encode_ms;
      s.decode_ms += m.decode_ms;
      s.network_ms += m.network_ms;
      s.wait_ms += m.wait_ms;
      s.exposed_comm_ms += m.exposed_comm_ms;
      s.retries += m.retries;
      AppendLine(StepJson(opt_.rank, m).Done());
      log_images += b.size;
      if (c.train.log_every > 0 && m.step % c.train.log_every == 0) {
        spdlog::info(
            "worker-{} epoch {} step {} loss {:.4f} {:.0f} images/s up {} B down {} B per step "
            "ratio {:.1f}/{:.1f}",
            opt_.rank, epoch, m.step, m.loss,
            log_images / std::max(1e-9, since_log.ElapsedSeconds()), m.bytes_up, m.bytes_down,
            m.bytes_up ? static_cast<double>(dense_bytes_) / m.bytes_up : 0.0,
            m.bytes_down ? static_cast<double>(dense_bytes_) / m.bytes_down : 0.0);
        since_log.Restart();
        log_images = 0;
      }
    }
    if (rejoined) {
      // Back to the server's step: restart the loop at its epoch and batch.
      epoch = step_ / steps_per_epoch - 1;
      continue;
    }
    if (stop) WriteCheckpoint();  // the state right after the last step, before evaluation
    if (seen == 0 && stop) break;
    EpochMetrics em;
    em.epoch = epoch;
    em.train_acc = seen > 0 ? static_cast<double>(correct) / seen : 0.0;
    em.test_acc = periodic() ? EndEpochPeriodic(epoch, &sum_up, &sum_down) : Evaluate();
    em.epoch_s = epoch_timer.ElapsedSeconds();
    s.epoch_metrics.push_back(em);
    s.test_acc = em.test_acc;
    ++s.epochs;
    AppendLine(JsonLine()
                   .Int("rank", opt_.rank)
                   .Int("epoch", em.epoch)
                   .Int("step", step_)
                   .Num("bytes_total", sum_up + sum_down)  // this worker's, cumulative
                   .Num("train_acc", em.train_acc)
                   .Num("test_acc", em.test_acc)
                   .Num("epoch_s", em.epoch_s)
                   .Done());
    spdlog::info("worker-{} epoch {} train_acc {:.4f} test_acc {:.4f} ({:.1f} s)", opt_.rank, epoch,
                 em.train_acc, em.test_acc, em.epoch_s);
    if (controller_ && seen > 0 && !stop) {
      // The training loss on the same fixed training images on every worker (their weights
      // are equal), so all workers take the same decision; the mean loss of their own
      // batches differs by shard.
      const CompressionDecision d = controller_->Update(em.test_acc, ProbeTrainLoss(4096));
      if (d.changed) SetPushCodec(d, epoch);
    }
    if (stop) break;
  }
  WriteCheckpoint();  // the end state (a no-op if the last step's checkpoint exists)
  s.steps = done;
  const double d = std::max<int64_t>(1, done);
  s.bytes_up_per_step = sum_up / d;
  s.bytes_down_per_step = sum_down / d;
  s.ratio_up = sum_up > 0 ? dense_bytes_ * d / sum_up : 0.0;
  s.ratio_down = sum_down > 0 ? dense_bytes_ * d / sum_down : 0.0;
  s.step_ms /= d;
  s.compute_ms /= d;
  s.encode_ms /= d;
  s.decode_ms /= d;
  s.network_ms /= d;
  s.wait_ms /= d;
  s.exposed_comm_ms /= d;
  s.overlap = pipelined();
  s.wall_s = wall.ElapsedSeconds();
  if (opt_.rank == 0 && done > 0) WriteSummary(s);  // a resumed, finished run keeps its own
  if (done == 0) spdlog::info("worker-{}: nothing left to train at step {}", opt_.rank, step_);
  return s;
}

void Trainer::WriteSummary(const TrainSummary& s) const {
  if (!opt_.run_dir.empty()) WriteSummaryJson(opt_.run_dir, opt_.config, opt_.workers, s);
}

}  // namespace gradpress::worker
