#include "plan/calibration.h"

#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>

#include "bench/bench.h"
#include "common/codec_spec.h"
#include "common/error.h"
#include "common/json_line.h"
#include "common/timer.h"
#include "compressors/compressor_config.h"
#include "compressors/registry.h"
#include "worker/bucket_scheduler.h"
#include "worker/data/dataset.h"
#include "worker/data/sampler.h"
#include "worker/data/transforms.h"
#include "worker/models/model_factory.h"

namespace gradpress::plan {
namespace {

// A codec per key: the configured one, or none for keys that travel uncompressed.
std::vector<std::unique_ptr<compressors::Compressor>> Codecs(const CodecSpec& spec,
                                                             const std::vector<torch::Tensor>& p,
                                                             const Config& c) {
  std::vector<std::unique_ptr<compressors::Compressor>> out;
  CodecSpec none;
  none.codec = "none";
  for (const auto& t : p) {
    const bool compressed =
        compressors::TravelsCompressed(t.sizes().vec(), c.compress.min_numel, c.compress.skip_1d);
    out.push_back(compressors::MakeCompressor(compressed ? spec : none));
  }
  return out;
}

}  // namespace

std::vector<Calibration> Calibrate(const Config& config, const std::vector<std::string>& methods,
                                   int steps) {
  GP_ENFORCE(steps >= 1, "calibration steps must be at least 1, not ", steps);
  GP_ENFORCE(!methods.empty(), "no method to calibrate");
  const Config& c = config;
  compressors::RegisterBuiltinCompressors();
  torch::set_num_threads(std::max(1, c.train.threads));
  const int64_t batch = c.train.batch_size;
  const auto data = worker::data::LoadDataset(c.dataset.name, c.dataset.path, 2 * batch, 1,
                                              static_cast<uint64_t>(c.train.seed));
  const int64_t channels = data.train.images.size(1), size = data.train.images.size(2);
  torch::manual_seed(c.train.seed);
  auto model = worker::models::MakeJobModel(c.model, c.model_path, channels, size,
                                            worker::data::kNumClasses);
  model->train();
  std::vector<torch::Tensor> params = model->parameters();
  torch::optim::SGD sgd(params, torch::optim::SGDOptions(c.train.lr).momentum(c.train.momentum));
  const std::vector<int> split = worker::BucketScheduler::Split(params, c.sync.bucket_mb);
  // Buckets in backward order: the split runs from the last key backwards.
  std::vector<std::pair<size_t, size_t>> keys;  // [begin, end) per bucket, model order
  for (size_t begin = 0, b = 0; b < split.size(); begin += split[b], ++b)
    keys.push_back({begin, begin + split[b]});
  std::reverse(keys.begin(), keys.end());
  struct Method {
    std::vector<std::unique_ptr<compressors::Compressor>> push, pull;
    std::vector<std::vector<double>> enc, dec, push_ms, fin;  // per bucket, per step
    Calibration out;
  };
  std::vector<Method> ms(methods.size());
  for (size_t m = 0; m < methods.size(); ++m) {
    const CodecSpec push = methods[m].empty() ? c.push : ParseCodecShorthand(methods[m]);
    const CodecSpec pull = methods[m].empty() ? c.pull : ParseCodecShorthand(methods[m]);
    ms[m].push = Codecs(push, params, c);
    ms[m].pull = Codecs(pull, params, c);
    ms[m].enc.resize(keys.size());
    ms[m].dec.resize(keys.size());
    ms[m].push_ms.resize(keys.size());
    ms[m].fin.resize(keys.size());
    ms[m].out.method = methods[m].empty() ? push.ToShorthand() : methods[m];
    ms[m].out.buckets.resize(keys.size());
  }

  std::vector<double> ready_ms(params.size());
  Timer backward_clock;
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].register_hook([&ready_ms, &backward_clock, i](const torch::Tensor&) {
      ready_ms[i] = backward_clock.ElapsedMs();
    });
  }
  const auto idx = worker::data::EpochIndices(data.train.size(), 0, 1, 0, 1);
  const auto b0 = worker::data::GatherBatch(data.train, idx, 0, batch);
  std::vector<double> fwd, bwd, opt;
  std::vector<std::vector<double>> ready(keys.size());
  for (int s = 0; s <= steps; ++s) {  // step 0 warms up
    Timer t;
    sgd.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(b0.images), b0.labels);
    const double f = t.ElapsedMs();
    backward_clock.Restart();
    loss.backward();
    const double bw = backward_clock.ElapsedMs();
    for (size_t b = 0; b < keys.size(); ++b) {
      double r = 0;
      for (size_t i = keys[b].first; i < keys[b].second; ++i) r = std::max(r, ready_ms[i]);
      if (s > 0) ready[b].push_back(r);
      for (Method& m : ms) {
        double e = 0, d = 0, pm = 0, fm = 0;
        int64_t up = 0, down = 0, dense = 0;
        for (size_t i = keys[b].first; i < keys[b].second; ++i) {
          const torch::Tensor g = params[i].grad().detach().contiguous();
          Timer k;
          const compressors::Payload p = m.push[i]->Encode(g, {"k", s});
          e += k.ElapsedMs();
          k.Restart();
          const torch::Tensor mean = m.push[i]->Decode(p);  // the server's decode and add
          pm += k.ElapsedMs();
          k.Restart();
          const compressors::Payload q = m.pull[i]->Encode(mean, {"k", s});
          fm += k.ElapsedMs();
          k.Restart();
          (void)m.pull[i]->Decode(q);
          d += k.ElapsedMs();
          up += static_cast<int64_t>(p.bytes.size());
          down += static_cast<int64_t>(q.bytes.size());
          dense += g.numel() * 4;
        }
        if (s == 0) continue;
        m.enc[b].push_back(e);
        m.dec[b].push_back(d);
        m.push_ms[b].push_back(pm);
        m.fin[b].push_back(fm);
        m.out.buckets[b].bytes_up = up;
        m.out.buckets[b].bytes_down = down;
        m.out.buckets[b].dense_bytes = dense;
      }
    }
    Timer o;
    sgd.step();
    if (s == 0) continue;
    fwd.push_back(f);
    bwd.push_back(bw);
    opt.push_back(o.ElapsedMs());
  }
  std::vector<Calibration> out;
  for (Method& m : ms) {
    Calibration& c = m.out;
    c.forward_ms = bench::Median(fwd);
    c.backward_ms = bench::Median(bwd);
    c.optimizer_ms = bench::Median(opt);
    for (size_t b = 0; b < keys.size(); ++b) {
      BucketProfile& p = c.buckets[b];
      p.ready_ms = bench::Median(ready[b]);
      p.encode_ms = bench::Median(m.enc[b]);
      p.decode_ms = bench::Median(m.dec[b]);
      p.push_ms = bench::Median(m.push_ms[b]);
      p.finalize_ms = bench::Median(m.fin[b]);
    }
    std::stable_sort(
        c.buckets.begin(), c.buckets.end(),
        [](const BucketProfile& a, const BucketProfile& b) { return a.ready_ms < b.ready_ms; });
    out.push_back(std::move(c));
  }
  return out;
}

std::string CalibrationYaml(const Calibration& c) {
  YAML::Emitter e;
  e << YAML::Flow << YAML::BeginMap << YAML::Key << "method" << YAML::Value << YAML::DoubleQuoted
    << c.method << YAML::Key << "forward_ms" << YAML::Value << c.forward_ms << YAML::Key
    << "backward_ms" << YAML::Value << c.backward_ms << YAML::Key << "optimizer_ms" << YAML::Value
    << c.optimizer_ms << YAML::Key << "buckets" << YAML::Value << YAML::BeginSeq;
  for (const BucketProfile& b : c.buckets) {
    e << YAML::BeginMap << YAML::Key << "ready_ms" << YAML::Value << b.ready_ms << YAML::Key
      << "encode_ms" << YAML::Value << b.encode_ms << YAML::Key << "decode_ms" << YAML::Value
      << b.decode_ms << YAML::Key << "push_ms" << YAML::Value << b.push_ms << YAML::Key
      << "finalize_ms" << YAML::Value << b.finalize_ms << YAML::Key << "bytes_up" << YAML::Value
      << b.bytes_up << YAML::Key << "bytes_down" << YAML::Value << b.bytes_down << YAML::Key
      << "dense_bytes" << YAML::Value << b.dense_bytes << YAML::EndMap;
  }
  e << YAML::EndSeq << YAML::EndMap;
  return e.c_str();
}

Calibration CalibrationFromYaml(const std::string& text) {
  Calibration c;
  try {
    const YAML::Node n = YAML::Load(text);
    c.method = n["method"].as<std::string>();
    c.forward_ms = n["forward_ms"].as<double>();
    c.backward_ms = n["backward_ms"].as<double>();
    c.optimizer_ms = n["optimizer_ms"].as<double>();
    for (const auto& b : n["buckets"]) {
      BucketProfile p;
      p.ready_ms = b["ready_ms"].as<double>();
      p.encode_ms = b["encode_ms"].as<double>();
      p.decode_ms = b["decode_ms"].as<double>();
      p.push_ms = b["push_ms"].as<double>();
      p.finalize_ms = b["finalize_ms"].as<double>();
      p.bytes_up = b["bytes_up"].as<int64_t>();
      p.bytes_down = b["bytes_down"].as<int64_t>();
      p.dense_bytes = b["dense_bytes"].as<int64_t>();
      c.buckets.push_back(p);
    }
  } catch (const YAML::Exception& e) {
    throw InvalidArgument(std::string("calibration: not a gradpress-plan calibration (") +
                          e.what() + ")");
  }
  return c;
}

}  // namespace gradpress::plan
