// WorkerSession: gradpress.torch's worker over the C++ worker's client (worker_session.h).
#include "python/src/worker_session.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <utility>

#include "common/codec_spec.h"
#include "common/error.h"
#include "common/json_line.h"
#include "compressors/registry.h"
#include "transport/security.h"
#include "worker/blas.h"
#include "worker/data/dataset.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"

namespace gradpress::python {
namespace {

Config LoadJobConfig(const SessionOptions& o) {
  return o.config_path.empty() ? ParseConfig("{}", "<defaults>", o.overrides)
                               : LoadConfig(o.config_path, o.overrides);
}

// What this front end does not run (yet): the rest is every method the C++ worker runs.
void CheckSupported(const Config& c) {
  GP_ENFORCE(c.compress.clip_norm <= 0 && c.compress.dynamic.ladder.empty() &&
                 c.compress.warmup_epochs == 0 && !c.compress.auto_select,
             "gradpress.torch does not run compress.clip_norm, compress.dynamic, ",
             "compress.warmup_epochs or compress.auto yet");
}

}  // namespace

std::string CodecOverride(const std::string& block, const std::string& shorthand) {
  const CodecSpec spec = ParseCodecShorthand(shorthand);
  YAML::Emitter out;
  EmitCodecSpec(out, spec);
  return block + "=" + out.c_str();
}

WorkerDataSplits WorkerData(const Config& c, int rank, int world, int64_t epoch) {
  GP_ENFORCE(world >= 1 && rank >= 0 && rank < world, "rank ", rank, " outside world size ", world);
  const auto seed = static_cast<uint64_t>(c.train.seed);
  const worker::data::DatasetPair d = worker::data::LoadDataset(
      c.dataset.name, c.dataset.path, c.dataset.subset, c.dataset.test_subset, seed);
  const std::vector<int64_t> idx =
      worker::data::EpochIndices(d.train.size(), rank, world, epoch, seed);
  const worker::data::Dataset mine = worker::data::GatherBatch(d.train, idx, 0, idx.size());
  return {mine.images, mine.labels, d.test.images, d.test.labels};
}

WorkerSession::WorkerSession(SessionOptions options, std::vector<std::string> names,
                             std::vector<torch::Tensor> params)
    : opt_(std::move(options)),
      config_(LoadJobConfig(opt_)),
      id_(ResolveIdentity(opt_.rank, opt_.world_size, opt_.server, config_)),
      names_(std::move(names)),
      params_(std::move(params)),
      rows_(std::make_shared<worker::RowOutbox>()),
      files_(opt_.run_dir, id_.rank, rows_) {
  CheckSupported(config_);
  weights_ = config_.sync.exchange == "weights";
  config_.cluster.workers = id_.workers;  // the job's world size, as the server expects it
  config_.cluster.servers = ResolveServers(config_);
  worker::LogBlas(("worker-" + std::to_string(id_.rank)).c_str());
  GP_ENFORCE(!params_.empty(), "no parameters to exchange");
  GP_ENFORCE(names_.size() == params_.size(), names_.size(), " names for ", params_.size(),
             " parameters");
  std::set<std::string> seen;
  for (size_t i = 0; i < params_.size(); ++i) {
    GP_ENFORCE(seen.insert(names_[i]).second, "parameter name '", names_[i], "' repeats");
    GP_ENFORCE(params_[i].defined() && params_[i].scalar_type() == torch::kFloat32, "parameter '",
               names_[i], "' must be a float32 tensor");
    dense_bytes_ += params_[i].numel() * 4;
  }
  compressors::RegisterBuiltinCompressors();
  compressors::MakeCompressor(config_.pull);  // a bad pull codec fails here too
  transport::LoadClientSecurity(config_.security);
  worker::ClientOptions co =
      worker::ClientOptionsFor(config_, id_.rank, opt_.incarnation, id_.server);
  co.rows = rows_;
  client_ = worker::MakeWorkerClient(config_, co, params_);
  // A restarted shard met inside an exchange takes these weights (as the Trainer's).
  if (client_.sharded) client_.sharded->set_weights_source([this] { return Aliases(); });
  // Methods 1-5 in sync: buckets from backward's hooks when the model splits into several
  // (one bucket overlaps nothing). Else the C++ worker's serial exchange of the method, the
  // Python optimizer stepping where the C++ one would (worker/exchange.h).
  if (config_.sync.overlap && config_.sync.mode == "sync" && config_.sync.every == 1 &&
      config_.sync.exchange != "gaussian") {
    std::vector<int> split = worker::BucketScheduler::Split(params_, config_.sync.bucket_mb);
    if (split.size() > 1) {
      split_ = split;
      scheduler_ = std::make_unique<worker::BucketScheduler>(client_.client.get(), split_,
                                                             std::min<int>(8, split_.size()));
      for (const auto& p : params_) received_.push_back(torch::zeros_like(p));
    }
  }
  if (!scheduler_) {
    worker::ExchangeContext ctx;
    ctx.config = &config_;
    ctx.rank = id_.rank;
    ctx.client = client_.client.get();
    ctx.params = &params_;
    exchange_ = worker::MakeSerialExchange(ctx);
  }
  got_.assign(params_.size(), 0);
  if (!opt_.run_dir.empty()) {
    std::filesystem::create_directories(opt_.run_dir);
    if (id_.rank == 0) WriteResolvedConfig(config_, opt_.run_dir + "/config.yaml");
  }
}

WorkerSession::~WorkerSession() {
  try {
    Close(/*flush_rows=*/false);
  } catch (const std::exception&) {  // a destructor reports nothing; close() does
  }
}

bool WorkerSession::Connect(std::optional<int64_t> restored_step) {
  GP_ENFORCE_AS(FailedPrecondition, !closed_, "the session is closed");
  int64_t server_step = step_;
  if (!connected_) {
    std::vector<compressors::TensorSpec> specs;
    for (size_t i = 0; i < params_.size(); ++i)
      specs.push_back(
          {names_[i], exchange_ ? exchange_->KeyShape(params_[i]) : params_[i].sizes().vec()});
    const worker::RegisterInfo info = client_.client->Register(specs, split_);
    server_step = info.server_step;  // a server past step 0: this worker joins at its step
    server_rank_ = info.rank;
  }
  bool ours = false;
  const bool keep_own = restored_step && *restored_step == server_step && server_step > 0 &&
                        !weights_ && !(exchange_ && exchange_->traits().stats_keys);
  if (keep_own) {
    spdlog::info("worker-{}: rejoins at step {} with the weights of its own checkpoint", id_.rank,
                 server_step);
  } else if (exchange_ && exchange_->traits().stats_keys) {
    exchange_->Init();  // gaussian: the server holds statistics, not weights
  } else {
    std::vector<torch::Tensor> weights = Aliases();  // InitOrPull writes into the parameters
    ours = client_.client->InitOrPull(&weights);
  }
  if (restored_step && !keep_own && server_step > 0) {
    spdlog::warn(
        "worker-{}: its state is of step {}, the server is at step {}: it goes on "
        "from the server's weights with the optimizer state of step {}",
        id_.rank, *restored_step, server_step, *restored_step);
  }
  // The local step there (async and method 6 count their own; the others the server's).
  step_ = exchange_ ? exchange_->Reset(server_step) : server_step;
  connected_ = true;
  since_end_.Restart();
  return ours;
}

void WorkerSession::Gradient(size_t key, const torch::Tensor& grad, double lr) {
  GP_ENFORCE(scheduler_, "WorkerSession::Gradient without buckets (the serial step)");
  GP_ENFORCE(key < params_.size(), "key ", key, " outside the model");
  GP_ENFORCE_AS(FailedPrecondition, connected_,
                "call gradpress.torch.broadcast_parameters(model) before the first backward: "
                "every worker must start from the server's initial weights");
  if (!begun_) Begin(lr);
  GP_ENFORCE_AS(FailedPrecondition, !got_[key], "parameter '", names_[key],
                "' got a second gradient in step ", step_,
                ": call optimizer.step() after each backward (several backward passes per step "
                "are not supported)");
  got_[key] = 1;
  scheduler_->Gradient(key, grad);
}

StepMetrics WorkerSession::Exchange(double lr) {
  GP_ENFORCE_AS(FailedPrecondition, connected_,
                "call gradpress.torch.broadcast_parameters(model) before the first step");
  GP_ENFORCE_AS(FailedPrecondition, !closed_, "the session is closed");
  StepMetrics m;
  if (scheduler_) {
    if (!begun_) Begin(lr);  // no gradient at all: zeros
    begun_ = false;
    std::fill(got_.begin(), got_.end(), 0);
    worker::Merge(scheduler_->Finish(params_, &m.exposed_comm_ms), worker::Concurrency::kSerial,
                  &m);
    m.overlap = true;
    if (!weights_) worker::WriteGradients(params_, received_);  // weights: in place already
  } else {
    // The method's own exchange: gradient methods leave the averaged gradients in p.grad
    // (zeros pushed for a parameter without one), weights land in the parameters, method 6
    // syncs every sync.every steps (the caller stepped already).
    Timer wall;
    exchange_->SetLr(lr);  // the server's SGD (weights) or shadow weights follow the lr
    exchange_->Finish(step_, &m);
    m.exposed_comm_ms = wall.ElapsedMs();
  }
  m.step = step_++;
  pending_ = m;
  has_pending_ = true;
  return m;
}

void WorkerSession::Begin(double lr) {
  // Weights land in the parameters through fresh aliases (a loaded state_dict may have given
  // them new storage); gradients in received_.
  if (weights_) weights_out_ = Aliases();
  scheduler_->Begin(step_, weights_ ? &weights_out_ : &received_, lr);
  begun_ = true;
}

std::vector<torch::Tensor> WorkerSession::Aliases() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : params_) out.push_back(p.detach());
  return out;
}

double WorkerSession::EndEpoch(int64_t epoch, double accuracy) {
  GP_ENFORCE_AS(FailedPrecondition, connected_ && !closed_,
                "end_epoch: call broadcast_parameters first (and not after close)");
  if (!exchange_) return accuracy;  // the pipelined methods 1-5 have no epoch rule
  StepMetrics m;
  return exchange_->EndEpoch(
      epoch, [accuracy] { return accuracy; }, server_rank_, &m);
}

void WorkerSession::EndStep(double loss) {
  GP_ENFORCE(has_pending_, "WorkerSession::EndStep without Exchange");
  StepMetrics& m = pending_;
  m.loss = loss;
  m.step_ms = since_end_.ElapsedMs();
  // Forward, backward, the local optimizer's step and the loop's own work: the rest of the step.
  m.compute_ms = std::max(0.0, m.step_ms - m.exposed_comm_ms);
  since_end_.Restart();
  totals_.Add(m);
  files_.Step(m);
  last_ = m;
  has_pending_ = false;
}

void WorkerSession::Close(bool flush_rows) {
  if (closed_) return;
  closed_ = true;
  scheduler_.reset();  // its threads end; no step is in flight between steps
  exchange_.reset();
  if (connected_) {
    worker::TrainSummary s;
    s.steps = totals_.steps;
    s.totals = totals_;
    const double d = std::max<int64_t>(1, s.steps);
    const double up = totals_.Sum("bytes_up"), down = totals_.Sum("bytes_down");
    s.bytes_up_per_step = up / d;
    s.bytes_down_per_step = down / d;
    s.ratio_up = up > 0 ? dense_bytes_ * d / up : 0.0;
    s.ratio_down = down > 0 ? dense_bytes_ * d / down : 0.0;
    s.overlap = !split_.empty();
    s.wall_s = wall_.ElapsedSeconds();
    if (id_.rank == 0 && s.steps > 0)
      files_.Summary(config_, id_.workers, s, [](JsonLine& l) { l.Str("runner", "python"); });
    try {
      // The dashboard's last rows (no push follows them), as the Trainer sends them.
      if (flush_rows) client_.client->Heartbeat();
    } catch (const Error& e) {
      spdlog::warn("worker-{}: the last rows for the server's dashboard were not sent: {}",
                   id_.rank, e.what());
    }
  }
  // The client's heartbeat thread ends with it; the codecs it encodes with go after it.
  client_.client.reset();
  client_.sharded = nullptr;
  client_.codecs = nullptr;
  client_.own_codecs.reset();
}

std::string WorkerSession::SaveState() const {
  GP_ENFORCE_AS(FailedPrecondition, !closed_, "the session is closed");
  return client_.codecs->SaveState();
}

void WorkerSession::LoadState(std::string_view state) {
  GP_ENFORCE_AS(FailedPrecondition, !closed_ && connected_,
                "the codec state is restored once registered: call broadcast_parameters first");
  client_.codecs->LoadState(state);
}

}  // namespace gradpress::python
