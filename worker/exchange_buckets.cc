// The pipelined exchange of methods 1-5 (exchange.h: "buckets"), with BytePS's cross-barrier.
#include <torch/torch.h>

#include <optional>
#include <unordered_map>

#include "common/timer.h"
#include "worker/bucket_exchange.h"
#include "worker/exchange.h"
#include "worker/trainer.h"

namespace gradpress::worker {
namespace {

class BucketsExchange : public Exchange {
 public:
  BucketsExchange(ExchangeContext ctx, std::vector<int> split)
      : Exchange(ctx),
        split_(std::move(split)),
        weights_(ctx.config->sync.exchange == "weights"),
        cross_barrier_(ctx.config->sync.cross_barrier),
        received_(ZerosLikeParams()),
        buckets_(ctx.client, split_, std::min<int>(8, split_.size())),
        // DGC's clipping needs every gradient first: its buckets go out after backward.
        hooks_(ctx.config->compress.clip_norm <= 0) {
    for (size_t key = 0; key < ctx.params->size(); ++key)
      key_of_[(*ctx.params)[key].unsafeGetTensorImpl()] = key;
    settled_.assign(split_.size(), 1);
    if (!hooks_) return;
    for (size_t i = 0; i < ctx.params->size(); ++i) {
      BucketExchange* ex = &buckets_;
      (*ctx.params)[i].register_hook([ex, i](const torch::Tensor& g) { ex->Gradient(i, g); });
    }
  }
  std::vector<int> bucket_keys() const override { return split_; }
  bool overlaps() const override { return true; }
  bool defers() const override { return cross_barrier_; }
  bool pending() const override { return pending_; }
  void Init() override {
    Drop();
    Exchange::Init();
  }
  int64_t Reset(int64_t server_step) override {
    Drop();  // a step the server has forgotten (rejoin) is not applied
    return server_step;
  }
  // The next step's lr waits until this step's results are applied and its pushes are out
  // (the buckets read the server's lr as they go).
  void SetLr(double lr) override {
    next_lr_.reset();
    if (pending_)
      next_lr_ = lr;
    else
      Exchange::SetLr(lr);
  }
  void Begin(int64_t step) override {
    GP_ENFORCE(!pending_, "BucketsExchange::Begin while step results are pending: Settle first");
    if (next_lr_) Exchange::SetLr(*next_lr_);
    next_lr_.reset();
    // Fresh aliases each step: restoring a checkpoint may give the parameters new storage.
    if (weights_) weights_out_ = Aliases();
    buckets_.Begin(step, weights_ ? &weights_out_ : &received_);
  }
  StepStats Finish(int64_t step, StepMetrics* m) override {
    (void)step;
    auto& params = *ctx_.params;
    m->overlap = true;
    if (!hooks_) {  // after clipping: every bucket at once, in backward's order
      for (size_t i = params.size(); i-- > 0;) buckets_.Gradient(i, params[i].grad());
    }
    if (!cross_barrier_) {
      StepStats st = buckets_.Finish(params, &m->exposed_comm_ms);
      // Weights were written into the parameters in place; gradients are applied here.
      if (!weights_) m->compute_ms += ApplyGradients(received_);
      return st;
    }
    buckets_.Seal(params);
    std::fill(settled_.begin(), settled_.end(), 0);
    done_ = SettledStep{};
    pending_ = true;
    return {};
  }
  void GateLayer(const torch::nn::Module& layer) override {
    if (!pending_) return;
    for (const auto& p : layer.parameters()) {
      const auto it = key_of_.find(p.unsafeGetTensorImpl());
      if (it != key_of_.end()) SettleBucket(buckets_.bucket_of(it->second));
    }
  }
  bool Settle(SettledStep* done) override {
    if (!pending_) return false;
    for (size_t b = 0; b < split_.size(); ++b) SettleBucket(static_cast<int>(b));
    double waited = 0;
    pending_ = false;
    done_.stats = buckets_.Wait(&waited);  // every bucket has ended: only the sums are left
    done_.exposed_ms += waited;
    *done = done_;
    return true;
  }

 private:
  void SettleBucket(int b) {
    if (settled_[b]) return;
    Timer waited;
    const bool ok = buckets_.WaitBucket(b);
    done_.exposed_ms += waited.ElapsedMs();
    if (!ok) {
      pending_ = false;
      buckets_.Wait();  // rethrows the failure once every bucket has ended
    }
    if (!weights_) {  // weights were written into the parameters in place
      const auto [begin, end] = ctx_.client->BucketKeys(b);
      done_.apply_ms += ApplyKeys(begin, end);
    }
    settled_[b] = 1;
  }
  // The optimizer's step for keys [begin, end) alone, on their received gradients: SGD
  // updates each parameter on its own, so the buckets' steps together are bit-for-bit the one
  // step over all parameters.
  double ApplyKeys(size_t begin, size_t end) {
    Timer t;
    auto& params = *ctx_.params;
    std::vector<torch::Tensor> saved(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      saved[i] = params[i].grad();
      params[i].mutable_grad() = i >= begin && i < end ? received_[i] : torch::Tensor();
    }
    ctx_.optimizer->step();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = saved[i];
    return t.ElapsedMs();
  }
  void Drop() {
    next_lr_.reset();  // the caller sets the lr of where it goes on
    if (!pending_) return;
    pending_ = false;
    try {
      buckets_.Wait();
    } catch (const std::exception&) {  // the step is being abandoned anyway
    }
  }

  std::vector<int> split_;
  bool weights_;
  bool cross_barrier_;
  std::vector<torch::Tensor> received_;
  std::vector<torch::Tensor> weights_out_;  // weights: aliases of the parameters
  BucketExchange buckets_;
  bool hooks_;
  std::unordered_map<const c10::TensorImpl*, size_t> key_of_;  // parameter -> key
  bool pending_ = false;                                       // Finish ran, Settle did not
  std::vector<char> settled_;                                  // per bucket, the pending step
  std::optional<double> next_lr_;                              // SetLr while pending
  SettledStep done_;
};

}  // namespace

std::unique_ptr<Exchange> MakeBucketsExchange(ExchangeContext ctx, std::vector<int> split) {
  return std::make_unique<BucketsExchange>(ctx, std::move(split));
}

}  // namespace gradpress::worker
