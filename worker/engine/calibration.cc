#include "worker/engine/calibration.h"

#include <torch/torch.h>

#include <algorithm>
#include <memory>

#include "common/error.h"
#include "common/median.h"
#include "common/timer.h"
#include "compressors/compressor_config.h"
#include "compressors/registry.h"
#include "worker/data/dataset.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/engine/bucket_scheduler.h"
#include "worker/models/blas.h"
#include "worker/models/model_factory.h"

namespace gradpress::worker {
namespace {

// A codec per key: the given one, or none for keys that travel uncompressed.
std::vector<std::unique_ptr<compressors::Compressor>> Codecs(const CodecSpec& spec,
                                                             const std::vector<bool>& compressed) {
  std::vector<std::unique_ptr<compressors::Compressor>> out;
  for (bool c : compressed) out.push_back(compressors::MakeCompressor(c ? spec : CodecSpec{}));
  return out;
}

// One method's codecs and its samples, per key, per step.
struct Measured {
  std::vector<std::unique_ptr<compressors::Compressor>> push, pull;
  std::vector<std::vector<double>> enc, dec, push_ms, fin;
};

}  // namespace

KeyCalibration CalibrateKeys(const Config& config, const std::vector<CalibrationMethod>& methods,
                             int steps) {
  GP_ENFORCE(steps >= 1, "calibration steps must be at least 1, not ", steps);
  GP_ENFORCE(!methods.empty(), "no method to calibrate");
  const Config& c = config;
  compressors::RegisterBuiltinCompressors();
  SetComputeThreads(c.train.threads);
  const int64_t batch = c.train.batch_size;
  const auto data = data::LoadDataset(c.dataset.name, c.dataset.path, 2 * batch, 1,
                                      static_cast<uint64_t>(c.train.seed));
  const int64_t channels = data.train.images.size(1), size = data.train.images.size(2);
  auto model = models::MakeJobModel(c.model, c.model_path, channels, size, data::kNumClasses,
                                    static_cast<uint64_t>(c.train.seed));
  model->train();
  std::vector<torch::Tensor> params = model->parameters();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(c.train.lr).momentum(c.train.momentum));
  KeyCalibration k;
  for (const auto& item : model->named_parameters()) {
    k.names.push_back(item.key());
    k.compressed.push_back(compressors::TravelsCompressed(
        item.value().sizes().vec(), c.compress.min_numel, c.compress.skip_1d));
  }
  k.split = BucketScheduler::Split(params, c.sync.bucket_mb);
  const size_t n = params.size();
  std::vector<Measured> ms(methods.size());
  k.cost.assign(methods.size(), std::vector<KeyCost>(n));
  for (size_t m = 0; m < methods.size(); ++m) {
    ms[m].push = Codecs(methods[m].push, k.compressed);
    ms[m].pull = Codecs(methods[m].pull, k.compressed);
    for (auto* v : {&ms[m].enc, &ms[m].dec, &ms[m].push_ms, &ms[m].fin}) v->resize(n);
  }

  std::vector<double> ready_ms(n);
  Timer backward_clock;
  for (size_t i = 0; i < n; ++i) {
    params[i].register_hook([&ready_ms, &backward_clock, i](const torch::Tensor&) {
      ready_ms[i] = backward_clock.ElapsedMs();
    });
  }
  const auto idx = data::EpochIndices(data.train.size(), 0, 1, 0, 1);
  const auto b0 = data::GatherBatch(data.train, idx, 0, batch);
  std::vector<double> fwd, bwd, opt;
  std::vector<std::vector<double>> ready(n);
  for (int s = 0; s <= steps; ++s) {  // step 0 warms up
    Timer t;
    sgd.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(b0.images), b0.labels);
    const double f = t.ElapsedMs();
    backward_clock.Restart();
    loss.backward();
    const double bw = backward_clock.ElapsedMs();
    for (size_t i = 0; i < n; ++i) {
      if (s > 0) ready[i].push_back(ready_ms[i]);
      const torch::Tensor g = params[i].grad().detach().contiguous();
      for (size_t m = 0; m < ms.size(); ++m) {
        Measured& x = ms[m];
        Timer clock;
        const compressors::Payload p = x.push[i]->Encode(g, {"k", s});
        const double e = clock.ElapsedMs();
        clock.Restart();
        const torch::Tensor mean = x.push[i]->Decode(p);  // the server's decode and add
        const double pm = clock.ElapsedMs();
        clock.Restart();
        const compressors::Payload q = x.pull[i]->Encode(mean, {"k", s});
        const double fm = clock.ElapsedMs();
        clock.Restart();
        (void)x.pull[i]->Decode(q);
        const double d = clock.ElapsedMs();
        if (s == 0) continue;
        x.enc[i].push_back(e);
        x.push_ms[i].push_back(pm);
        x.fin[i].push_back(fm);
        x.dec[i].push_back(d);
        KeyCost& kc = k.cost[m][i];
        kc.bytes_up = static_cast<int64_t>(p.bytes.size());
        kc.bytes_down = static_cast<int64_t>(q.bytes.size());
        kc.dense_bytes = g.numel() * 4;
      }
    }
    Timer o;
    sgd.step();
    if (s == 0) continue;
    fwd.push_back(f);
    bwd.push_back(bw);
    opt.push_back(o.ElapsedMs());
  }
  k.forward_ms = Median(fwd);
  k.backward_ms = Median(bwd);
  k.optimizer_ms = Median(opt);
  for (size_t i = 0; i < n; ++i) k.ready_ms.push_back(Median(ready[i]));
  for (size_t m = 0; m < ms.size(); ++m) {
    for (size_t i = 0; i < n; ++i) {
      KeyCost& kc = k.cost[m][i];
      kc.encode_ms = Median(ms[m].enc[i]);
      kc.decode_ms = Median(ms[m].dec[i]);
      kc.push_ms = Median(ms[m].push_ms[i]);
      kc.finalize_ms = Median(ms[m].fin[i]);
    }
  }
  return k;
}

Calibration Assemble(const KeyCalibration& k, const std::vector<int>& choice,
                     const std::string& label) {
  GP_ENFORCE(choice.size() == k.keys(), "a choice for ", choice.size(), " keys, the model has ",
             k.keys());
  Calibration c;
  c.method = label;
  c.forward_ms = k.forward_ms;
  c.backward_ms = k.backward_ms;
  c.optimizer_ms = k.optimizer_ms;
  const std::vector<int> whole{static_cast<int>(k.keys())};
  size_t begin = 0;
  for (int count : k.split.empty() ? whole : k.split) {
    BucketProfile b;
    for (size_t i = begin; i < begin + static_cast<size_t>(count); ++i) {
      GP_ENFORCE(choice[i] >= 0 && static_cast<size_t>(choice[i]) < k.cost.size(), "key ", i,
                 ": method ", choice[i], " of ", k.cost.size());
      const KeyCost& kc = k.cost[choice[i]][i];
      b.ready_ms = std::max(b.ready_ms, k.ready_ms[i]);
      b.encode_ms += kc.encode_ms;
      b.decode_ms += kc.decode_ms;
      b.push_ms += kc.push_ms;
      b.finalize_ms += kc.finalize_ms;
      b.bytes_up += kc.bytes_up;
      b.bytes_down += kc.bytes_down;
      b.dense_bytes += kc.dense_bytes;
    }
    begin += static_cast<size_t>(count);
    c.buckets.push_back(b);
  }
  // Backward order: the bucket whose gradients are ready first goes first.
  std::stable_sort(
      c.buckets.begin(), c.buckets.end(),
      [](const BucketProfile& a, const BucketProfile& b) { return a.ready_ms < b.ready_ms; });
  return c;
}

}  // namespace gradpress::worker
