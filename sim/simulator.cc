#include "sim/simulator.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <map>

#include "common/error.h"
#include "common/tensor_bytes.h"
#include "common/timer.h"
#include "compressors/compressor_config.h"
#include "compressors/registry.h"
#include "server/server_options.h"
#include "worker/data/random.h"
#include "worker/models/model_factory.h"

namespace gradpress::sim {

using compressors::KeyPayload;
using server::Clock;

namespace {

// As the Trainer picks its device (worker/trainer.cc).
torch::Device PickDevice(const std::string& device) {
  if (device == "cuda" || (device == "auto" && torch::cuda::is_available()))
    return torch::Device(torch::kCUDA);
  return torch::Device(torch::kCPU);
}

Clock::time_point Forever() { return Clock::now() + std::chrono::hours(1); }

// "a.b: value" for every scalar under `node`.
void Flatten(const YAML::Node& node, const std::string& path,
             std::map<std::string, std::string>* out) {
  if (node.IsMap()) {
    for (const auto& kv : node) {
      const std::string key = kv.first.as<std::string>();
      Flatten(kv.second, path.empty() ? key : path + "." + key, out);
    }
  } else if (node.IsScalar()) {
    (*out)[path] = node.as<std::string>();
  } else if (node.IsSequence()) {
    (*out)[path] = YAML::Dump(node);
  }
}

// The compress.* keys the simulator models; any other compress.* key set away from its
// default (worker-side features such as DGC's momentum correction, clipping, warm-up or
// dynamic compression) is refused rather than silently ignored.
void RefuseUnsimulated(const Config& c) {
  std::map<std::string, std::string> mine, defaults;
  Flatten(YAML::Load(ToYaml(c))["compress"], "compress", &mine);
  const Config fresh;
  Flatten(YAML::Load(ToYaml(fresh))["compress"], "compress", &defaults);
  for (const auto& [key, value] : mine) {
    if (key == "compress.min_numel" || key == "compress.skip_1d") continue;
    auto d = defaults.find(key);
    GP_ENFORCE(d != defaults.end() && d->second == value, "gradpress-sim does not simulate ", key,
               " (", value, ") yet: run this config on the cluster (scripts/run.sh)");
  }
}

}  // namespace

Simulator::Simulator(SimOptions options)
    : opt_(std::move(options)), device_(PickDevice(opt_.config.device)) {
  Config& c = opt_.config;
  GP_ENFORCE(opt_.workers >= 1, "the simulator needs at least one worker, got ", opt_.workers);
  GP_ENFORCE(c.sync.mode == "sync", "sync.mode '", c.sync.mode,
             "': gradpress-sim simulates sync mode only (an async run's result depends on the "
             "order pushes arrive in); run it on the cluster (scripts/run.sh)");
  GP_ENFORCE(c.sync.every >= 1, "sync.every must be >= 1");
  GP_ENFORCE(c.sync.every == 1 || c.sync.exchange == "gradients", "sync.every ", c.sync.every,
             " (method 6) needs sync.exchange: gradients");
  GP_ENFORCE(c.sync.exchange == "gradients" || c.sync.exchange == "weights", "sync.exchange: '",
             c.sync.exchange, "': gradpress-sim simulates gradients and weights");
  GP_ENFORCE(c.train.batch_size >= 1, "train.batch_size must be >= 1");
  RefuseUnsimulated(c);
  c.cluster.workers = opt_.workers;
  exchange_weights_ = c.sync.exchange == "weights";
  torch::set_num_threads(std::max(1, c.train.threads));
  compressors::RegisterBuiltinCompressors();

  data_ = worker::data::LoadDataset(c.dataset.name, c.dataset.path, c.dataset.subset,
                                    c.dataset.test_subset, static_cast<uint64_t>(c.train.seed));
  const int64_t channels = data_.train.images.size(1), size = data_.train.images.size(2);
  // Every worker process seeds torch and builds the same model; method 6 keeps one each.
  const int models = periodic() ? opt_.workers : 1;
  for (int m = 0; m < models; ++m) {
    torch::manual_seed(c.train.seed);
    models_.push_back(
        worker::models::MakeModel(c.model, channels, size, worker::data::kNumClasses));
    models_.back()->to(device_);
    models_.back()->train();
    params_.emplace_back();
    for (const auto& p : models_.back()->parameters()) params_.back().push_back(p);
    if (!exchange_weights_) {
      torch::optim::SGDOptions so(c.train.lr);
      so.momentum(c.train.momentum).weight_decay(c.train.weight_decay).nesterov(c.train.nesterov);
      optimizers_.push_back(std::make_unique<torch::optim::SGD>(params_.back(), so));
    }
  }
  for (const auto& item : models_[0]->named_parameters()) {
    specs_.push_back({item.key(), item.value().sizes().vec()});
    received_.push_back(torch::zeros(item.value().sizes(), torch::kFloat32));
    dense_bytes_ += item.value().numel() * 4;
  }

  // The server: the same store, options and registration as a gradpress-server job.
  server::StoreOptions so = server::StoreOptionsFromConfig(c);
  so.workers = opt_.workers;
  so.checkpoint_dir.clear();
  store_ = std::make_unique<server::ParameterStore>(so);
  const std::string hash = ConfigHash(c);
  compressors::CompressorConfig push = compressors::FromCodecSpec(c.push);
  for (int r = 0; r < opt_.workers; ++r) {
    auto w = std::make_unique<Worker>();
    w->id = {"worker-" + std::to_string(r), 1};
    // The push codec per key exactly as PsClient's MakePushCodec builds it.
    for (const auto& s : specs_) {
      compressors::CompressorConfig pc = push;
      if (!compressors::TravelsCompressed(s.shape, c.compress.min_numel, c.compress.skip_1d))
        pc = {};
      w->push.push_back(compressors::MakeCompressor(pc));
    }
    w->rng.seed(worker::data::MixSeed(static_cast<uint64_t>(c.train.seed), r));
    if (!periodic())
      for (const auto& b : worker::models::BufferTensors(*models_[0]))
        w->buffers.push_back(b.detach().clone());
    store_->Register(w->id, specs_, hash);
    workers_.push_back(std::move(w));
  }
  // InitOrPull: worker 0's initial weights become the server's; every model adopts them.
  std::vector<KeyPayload> init;
  for (size_t i = 0; i < specs_.size(); ++i) {
    compressors::Payload p;
    p.codec = "none";
    p.shape = specs_[i].shape;
    p.bytes = TensorToBytes(params_[0][i].detach().to(torch::kCPU, torch::kFloat32).contiguous());
    init.push_back({specs_[i].key, std::move(p)});
  }
  store_->InitWeights(workers_[0]->id, init);
  auto weights = store_->Weights(workers_[0]->id, 0, Forever());
  torch::NoGradGuard no_grad;
  for (size_t m = 0; m < params_.size(); ++m) {
    for (size_t i = 0; i < specs_.size(); ++i) {
      const auto& bytes = weights->payloads[i].payload.bytes;
      GP_ENFORCE(bytes.size() == static_cast<size_t>(received_[i].numel()) * 4,
                 "initial weights of '", specs_[i].key, "' have the wrong size");
      std::memcpy(received_[i].data_ptr<float>(), bytes.data(), bytes.size());
      params_[m][i].copy_(received_[i]);
    }
  }
  for (auto& w : workers_)
    if (periodic())
      for (const auto& p : params_[0]) w->anchor.push_back(p.detach().clone());
}

Simulator::~Simulator() = default;

torch::nn::Module& Simulator::ModelOf(int rank) { return *models_[periodic() ? rank : 0]; }

std::vector<torch::Tensor> Simulator::Parameters(int rank) const {
  std::vector<torch::Tensor> out;
  for (const auto& p : params_[periodic() ? rank : 0]) out.push_back(p.detach());
  return out;
}

std::vector<torch::Tensor> Simulator::Buffers(int rank) {
  if (periodic() || opt_.workers == 1) return worker::models::BufferTensors(*models_[rank]);
  return workers_[rank]->buffers;
}

void Simulator::SwapIn(int rank) {
  if (periodic() || opt_.workers == 1) return;
  torch::NoGradGuard no_grad;
  auto model = worker::models::BufferTensors(*models_[0]);
  for (size_t i = 0; i < model.size(); ++i) model[i].copy_(workers_[rank]->buffers[i]);
}

void Simulator::SwapOut(int rank) {
  if (periodic() || opt_.workers == 1) return;
  torch::NoGradGuard no_grad;
  auto model = worker::models::BufferTensors(*models_[0]);
  for (size_t i = 0; i < model.size(); ++i) workers_[rank]->buffers[i].copy_(model[i]);
}

void Simulator::ApplyLr(double lr) {
  for (auto& o : optimizers_)
    for (auto& group : o->param_groups())
      static_cast<torch::optim::SGDOptions&>(group.options()).lr(lr);
}

std::vector<torch::Tensor> Simulator::Gradients(int rank, const worker::data::Dataset& batch,
                                                SimStepMetrics* m) {
  auto& model = *models_[periodic() ? rank : 0];
  Timer t;
  SwapIn(rank);
  model.zero_grad(/*set_to_none=*/true);  // as the Trainer: gradients become p.grad as is
  torch::Tensor x = batch.images.to(device_), y = batch.labels.to(device_);
  torch::Tensor logits = model.forward(x);
  torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
  loss.backward();
  m->loss = loss.item<double>();
  m->correct = logits.argmax(1).eq(y).sum().item<int64_t>();
  std::vector<torch::Tensor> grads;
  for (auto& p : ParamsOf(rank)) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  SwapOut(rank);
  m->compute_ms += t.ElapsedMs();
  return grads;
}

void Simulator::Push(int rank, int64_t step, const std::vector<torch::Tensor>& tensors, double lr,
                     SimStepMetrics* m) {
  Worker& w = *workers_[rank];
  Timer t;
  std::vector<KeyPayload> payloads(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    payloads[i].key = specs_[i].key;
    payloads[i].payload = w.push[i]->Encode(tensors[i], {specs_[i].key, step});
    m->bytes_up += payloads[i].payload.bytes.size();
  }
  m->encode_ms += t.ElapsedMs();
  // As PsClient after set_server_lr: the worker's scheduled lr rides along (methods 1-2).
  std::optional<double> server_lr;
  if (exchange_weights_) server_lr = lr;
  store_->PushPull(w.id, step, 0, std::move(payloads), Forever(), /*wait=*/false, server_lr);
}

double Simulator::PullResult(int64_t step, uint64_t* bytes, double* server_ms) {
  auto result = store_->Pull(workers_[0]->id, step, Forever());
  GP_ENFORCE(result && result->step == step, "the store has no result of step ", step);
  *server_ms = result->server_ms;
  Timer t;
  *bytes = 0;
  for (size_t i = 0; i < specs_.size(); ++i) {
    const compressors::Payload& p = result->payloads[i].payload;
    *bytes += p.bytes.size();
    auto& decoder = decoders_[p.codec];
    if (!decoder) decoder = compressors::MakeDecoder(p.codec);
    decoder->DecodeTo(p.bytes, received_[i].numel(), received_[i].data_ptr<float>());
  }
  return t.ElapsedMs();
}

std::vector<SimStepMetrics> Simulator::Step(const std::vector<worker::data::Dataset>& batches,
                                            double lr) {
  GP_ENFORCE(static_cast<int>(batches.size()) == opt_.workers, "Step: ", batches.size(),
             " batches for ", opt_.workers, " workers");
  std::vector<SimStepMetrics> ms(opt_.workers);
  for (int r = 0; r < opt_.workers; ++r) ms[r].step = step_;
  ApplyLr(lr);
  if (periodic()) {
    for (int r = 0; r < opt_.workers; ++r) {
      Gradients(r, batches[r], &ms[r]);
      Timer t;
      OptimizerOf(r).step();  // the worker's own gradient; the update goes at the next sync
      ms[r].compute_ms += t.ElapsedMs();
    }
    if (++since_sync_ == opt_.config.sync.every) Sync(&ms, lr);
  } else {
    // Same weights everywhere: one model takes each worker's batch in turn.
    for (int r = 0; r < opt_.workers; ++r) {
      const std::vector<torch::Tensor> grads = Gradients(r, batches[r], &ms[r]);
      Push(r, step_, grads, lr, &ms[r]);
    }
    uint64_t bytes_down = 0;
    double server_ms = 0;
    const double decode_ms = PullResult(step_, &bytes_down, &server_ms);
    Timer t;
    {
      torch::NoGradGuard no_grad;
      auto& params = ParamsOf(0);
      if (exchange_weights_) {
        for (size_t i = 0; i < params.size(); ++i) params[i].copy_(received_[i]);
      } else {
        for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad().copy_(received_[i]);
      }
    }
    if (!exchange_weights_) OptimizerOf(0).step();
    const double apply_ms = t.ElapsedMs();
    for (auto& m : ms) {
      m.bytes_down = bytes_down;
      m.decode_ms = decode_ms;
      m.server_ms = server_ms;
      m.compute_ms += apply_ms;  // every real worker applies the result itself
    }
  }
  for (auto& m : ms) m.step_ms = m.compute_ms + m.encode_ms + m.server_ms + m.decode_ms;
  ++step_;
  return ms;
}

double Simulator::Evaluate(int rank) {
  torch::NoGradGuard no_grad;
  auto& model = *models_[periodic() ? rank : 0];
  SwapIn(rank);
  model.eval();
  const worker::data::Dataset& test = data_.test;
  int64_t correct = 0;
  const int64_t n = test.size(), batch = 256;
  for (int64_t b = 0; b < n; b += batch) {
    const int64_t e = std::min(n, b + batch);
    torch::Tensor logits =
        models_[periodic() ? rank : 0]->forward(test.images.slice(0, b, e).to(device_));
    correct += logits.argmax(1).eq(test.labels.slice(0, b, e).to(device_)).sum().item<int64_t>();
  }
  model.train();
  SwapOut(rank);
  return n > 0 ? static_cast<double>(correct) / n : 0.0;
}

}  // namespace gradpress::sim
