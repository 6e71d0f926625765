// The Trainer's dynamic compression (the controller's codec changes and its loss probe) and
// compress.auto's choice of a push codec per key.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "common/json_line.h"
#include "compressors/compressor_config.h"
#include "worker/auto_codecs.h"
#include "worker/trainer.h"

namespace gradpress::worker {

void Trainer::ChooseCodecs() {
  KeyCalibration calibration;
  const AutoChoice a =
      ChooseKeyCodecs(opt_.config, AutoCluster(opt_.config), /*steps=*/3, &calibration);
  for (const std::string& line : a.Describe(calibration))
    spdlog::info("worker-{} {}", opt_.rank, line);
  auto_push_ = a.push;
}

void Trainer::SetPushCodec(const CompressionDecision& d, int64_t epoch) {
  Settle();  // the codecs of a step still in flight stay until it ends
  client_.codecs->SetPushCodec(d.spec == "none" ? CodecSpec{} : ParseCodecShorthand(d.spec));
  if (epoch < 0) {
    spdlog::info("worker-{} push codec: {} (dynamic compression, rung {})", opt_.rank, d.spec,
                 d.rung);
    return;
  }
  spdlog::info("worker-{} epoch {}: push codec -> {} ({})", opt_.rank, epoch, d.spec, d.reason);
  files_.CodecChange(epoch, step_, d.spec, d.rung, d.reason);
}

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
