// Trainer, part four: the dynamic-compression controller's codec changes and its loss probe.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "common/json_line.h"
#include "compressors/compressor_config.h"
#include "worker/trainer.h"

namespace gradpress::worker {

void Trainer::SetPushCodec(const CompressionDecision& d, int64_t epoch) {
  Settle();  // the codecs of a step still in flight stay until it ends
  client_->SetPushCodec(d.spec == "none" ? CodecSpec{} : ParseCodecShorthand(d.spec));
  if (epoch < 0) {
    spdlog::info("worker-{} push codec: {} (dynamic compression, rung {})", opt_.rank, d.spec,
                 d.rung);
    return;
  }
  spdlog::info("worker-{} epoch {}: push codec -> {} ({})", opt_.rank, epoch, d.spec, d.reason);
  AppendLine(JsonLine()
                 .Int("rank", opt_.rank)
                 .Int("epoch", epoch)
                 .Int("step", step_)
                 .Str("push_codec", d.spec)
                 .Int("rung", d.rung)
                 .Str("reason", d.reason)
                 .Done());
  proto::WorkerRow row;
  row.set_kind(proto::WorkerRow::CODEC);
  row.set_rank(opt_.rank);
  row.set_epoch(static_cast<int32_t>(epoch));
  row.set_step(step_);
  row.set_push_codec(d.spec);
  row.set_rung(d.rung);
  client_->Report(row);
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
