// WorkerSession: gradpress.torch's worker over the C++ worker's client (worker_session.h).
#include "python/src/worker_session.h"

#include <ATen/Parallel.h>
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
#include "worker/data/dataset.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/models/blas.h"

namespace gradpress::python {
namespace {

Config LoadJobConfig(const SessionOptions& o) {
  return o.config_path.empty() ? ParseConfig("{}", "<defaults>", o.overrides)
                               : LoadConfig(o.config_path, o.overrides);
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
  config_.cluster.workers = id_.workers;  // the job's world size, as the server expects it
  config_.cluster.servers = ResolveServers(config_);
  // The BLAS's own threads follow torch's intra-op setting (torch.set_num_threads, or
  // OMP_NUM_THREADS), so the BLAS adds none beside them.
  worker::SetComputeThreads(at::get_num_threads());
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
  worker::EngineOptions eo;
  eo.config = &config_;
  eo.rank = id_.rank;
  eo.workers = id_.workers;
  eo.params = &params_;
  eo.names = names_;
  eo.log = &files_;
  eo.register_hooks = false;  // Python's hooks feed the buckets with the step's lr
  // No optimizer: the Python one steps where the C++ one would (worker/engine/exchange.h).
  engine_ = std::make_unique<worker::StepEngine>(std::move(eo),
                                                 worker::MakeWorkerClient(config_, co, &params_));
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

worker::StepEngine& WorkerSession::Open(const char* what) {
  GP_ENFORCE_AS(FailedPrecondition, engine_ != nullptr, what, ": the session is closed");
  return *engine_;
}

bool WorkerSession::Connect(std::optional<int64_t> restored_step, int64_t epoch,
                            std::optional<int> root_rank) {
  worker::StepEngine& e = Open("connect");
  if (connected_) return false;
  const worker::Connection c = e.Connect(restored_step, root_rank);
  e.StartEpoch(epoch);
  connected_ = true;
  since_end_.Restart();
  return c.ours;
}

void WorkerSession::Begin(double lr, std::vector<double> key_lr) {
  worker::StepEngine& e = Open("step");
  GP_ENFORCE_AS(FailedPrecondition, connected_,
                "call gradpress.torch.broadcast_parameters(model) before the first backward: "
                "every worker must start from the server's initial weights");
  if (begun_) return;
  e.BeginStep(lr, std::move(key_lr));
  begun_ = true;
}

void WorkerSession::Gradient(size_t key, const torch::Tensor& grad) {
  worker::StepEngine& e = Open("gradient");
  GP_ENFORCE(key < params_.size(), "key ", key, " outside the model");
  GP_ENFORCE_AS(FailedPrecondition, connected_,
                "call gradpress.torch.broadcast_parameters(model) before the first backward: "
                "every worker must start from the server's initial weights");
  GP_ENFORCE(begun_, "WorkerSession::Gradient before Begin");
  GP_ENFORCE_AS(FailedPrecondition, !got_[key], "parameter '", names_[key],
                "' got a second gradient in step ", e.step(),
                ": call optimizer.step() after each backward, or make the optimizer with "
                "backward_passes_per_step=N to accumulate N backward passes per step");
  got_[key] = 1;
  e.Gradient(key, grad);
}

void WorkerSession::PrepareGradients() {
  worker::StepEngine& e = Open("step");
  GP_ENFORCE_AS(FailedPrecondition, connected_,
                "call gradpress.torch.broadcast_parameters(model) before the first step");
  e.PrepareGradients(&prepared_);
}

StepMetrics WorkerSession::Exchange(double lr, std::vector<double> key_lr) {
  worker::StepEngine& e = Open("step");
  GP_ENFORCE_AS(FailedPrecondition, connected_,
                "call gradpress.torch.broadcast_parameters(model) before the first step");
  StepMetrics m;
  m.step = e.step();
  m.compute_ms = prepared_.compute_ms;
  prepared_ = StepMetrics{};
  Begin(lr, std::move(key_lr));  // no gradient from a hook (the serial step, or none): now
  if (e.feeds()) {
    // Keys no hook sent (backward_passes_per_step > 1: p.grad holds the passes' sum) go from
    // p.grad, in backward's order; a key without one is exchanged as zeros.
    for (size_t i = params_.size(); i-- > 0;)
      if (!got_[i] && params_[i].grad().defined()) e.Gradient(i, params_[i].grad());
  }
  begun_ = false;
  std::fill(got_.begin(), got_.end(), 0);
  // Gradient methods leave the averaged gradients in p.grad (zeros pushed for a parameter
  // without one), weights land in the parameters, method 6 syncs every sync.every steps.
  e.FinishStep(&m);
  worker::SettledStep done;  // cross-barrier: no layer gates here, the step completes now
  if (e.Settle(&done)) {
    worker::Merge(done.stats, worker::Concurrency::kSerial, &m);
    m.exposed_comm_ms += done.exposed_ms;
  }
  pending_ = m;
  has_pending_ = true;
  return m;
}

std::vector<int> WorkerSession::split() const {
  return engine_ ? engine_->traits().bucket_keys : std::vector<int>{};
}

double WorkerSession::EndEpoch(int64_t epoch, double accuracy, std::optional<double> train_loss) {
  worker::StepEngine& e = Open("end_epoch");
  GP_ENFORCE_AS(FailedPrecondition, connected_, "end_epoch: call broadcast_parameters first");
  StepMetrics m;
  const double kept = e.EndEpoch(
      epoch, [accuracy] { return accuracy; },
      [&]() -> double {
        GP_ENFORCE(train_loss.has_value(),
                   "compress.dynamic decides from the training loss: call end_epoch(epoch, "
                   "accuracy, train_loss=...) with the loss on training images every worker "
                   "evaluates alike");
        return *train_loss;
      },
      /*adapt=*/true, &m);
  e.StartEpoch(epoch + 1);
  return kept;
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
  if (!engine_) return;
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
    s.overlap = engine_->traits().overlaps;
    s.wall_s = wall_.ElapsedSeconds();
    if (id_.rank == 0 && s.steps > 0)
      files_.Summary(config_, id_.workers, s, [](JsonLine& l) { l.Str("runner", "python"); });
    try {
      // The dashboard's last rows (no push follows them), as the Trainer sends them.
      if (flush_rows) engine_->client().Heartbeat();
    } catch (const Error& e) {
      spdlog::warn("worker-{}: the last rows for the server's dashboard were not sent: {}",
                   id_.rank, e.what());
    }
  }
  // The exchange's threads, the client's heartbeat thread and the codecs end with it (no step
  // is in flight between steps).
  engine_.reset();
}

std::string WorkerSession::Broadcast(const std::string& name, bool root, std::string data) {
  worker::StepEngine& e = Open("broadcast");
  GP_ENFORCE_AS(FailedPrecondition, connected_,
                "broadcast: call broadcast_parameters first (the worker registers there)");
  const int64_t round = broadcasts_[name]++;  // counted whatever the outcome, on every worker
  e.client().Broadcast(name, round, root, &data);
  return data;
}

std::string WorkerSession::ServerStats() { return Open("server_stats").client().StatsText(); }

std::string WorkerSession::SaveState() const {
  GP_ENFORCE_AS(FailedPrecondition, engine_ != nullptr, "save_state: the session is closed");
  return engine_->codecs().SaveState();
}

void WorkerSession::LoadState(std::string_view state) {
  worker::StepEngine& e = Open("load_state");
  GP_ENFORCE_AS(FailedPrecondition, connected_,
                "the codec state is restored once registered: call broadcast_parameters first");
  e.codecs().LoadState(state);
}

std::vector<std::string> WorkerSession::AutoCodecs() const {
  std::vector<std::string> out;
  if (engine_)
    for (const CodecSpec& s : engine_->auto_codecs()) out.push_back(s.ToShorthand());
  return out;
}

void WorkerSession::SetAutoCodecs(const std::vector<std::string>& per_key) {
  worker::StepEngine& e = Open("set_auto_codecs");
  GP_ENFORCE_AS(FailedPrecondition, connected_,
                "the codecs are set once registered: call broadcast_parameters first");
  std::vector<CodecSpec> specs;
  for (const std::string& s : per_key) specs.push_back(ParseCodecShorthand(s));
  e.SetAutoCodecs(std::move(specs));
}

}  // namespace gradpress::python
