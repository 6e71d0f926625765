// The pipelined exchange of methods 1-5 (exchange.h: "pipelined"), with BytePS's cross-barrier:
// the buckets run on a BucketScheduler (bucket_scheduler.h).
#include <torch/torch.h>

#include <optional>
#include <unordered_map>

#include "common/error.h"
#include "common/timer.h"
#include "worker/engine/bucket_scheduler.h"
#include "worker/engine/exchange.h"

namespace gradpress::worker {
namespace {

// Cross-barrier applies each bucket as the next forward reaches it: weights are written in
// place, gradients need the local optimizer's step per bucket. Without one (the caller steps
// its own: gradpress.torch) the averaged gradients are handed over whole, in Finish.
bool CrossBarrier(const ExchangeContext& ctx) {
  return ctx.config->sync.cross_barrier &&
         (ctx.config->sync.exchange == "weights" || ctx.optimizer != nullptr);
}

class PipelinedExchange : public Exchange, public GradientFeed {
 public:
  PipelinedExchange(ExchangeContext ctx, std::vector<int> split)
      : Exchange(ctx, {/*stats_keys=*/false, split, /*server_follows_lr=*/true, /*overlaps=*/true,
                       /*defers=*/CrossBarrier(ctx)}),
        split_(std::move(split)),
        weights_(ctx.config->sync.exchange == "weights"),
        cross_barrier_(CrossBarrier(ctx)),
        received_(ZerosLikeParams()),
        buckets_(ctx.client, split_, std::min<int>(8, split_.size())),
        // DGC's clipping needs every gradient first: its buckets go out after backward.
        hooks_(ctx.config->compress.clip_norm <= 0) {
    for (size_t key = 0; key < ctx.params->size(); ++key)
      key_of_[(*ctx.params)[key].unsafeGetTensorImpl()] = key;
    settled_.assign(split_.size(), 1);
    if (!hooks_ || !ctx.register_hooks) return;
    for (size_t i = 0; i < ctx.params->size(); ++i)
      (*ctx.params)[i].register_hook([this, i](const torch::Tensor& g) { Feed(i, g); });
  }
  ~PipelinedExchange() override { Drop(); }
  int64_t Reset(int64_t server_step) override {
    Drop();  // a step the server has forgotten (rejoin) is not applied
    begun_ = false;
    prepared_ = false;
    return server_step;
  }
  void Gradient(size_t key, const torch::Tensor& grad) override {
    GP_ENFORCE(hooks_, "the pipelined step takes no gradient from backward with ",
               "compress.clip_norm set: its buckets go out once every gradient is clipped");
    Feed(key, grad);
  }
  std::unique_ptr<PendingStep> Finish(int64_t step, StepMetrics* m) override {
    (void)step;
    auto& params = *ctx_.params;
    m->overlap = true;
    Begin();  // no gradient came from a hook (clipping, or none at all)
    begun_ = false;
    prepared_ = false;
    if (!hooks_) {  // after clipping: every bucket at once, in backward's order
      for (size_t i = params.size(); i-- > 0;) buckets_.Gradient(i, params[i].grad());
    }
    if (!cross_barrier_) {
      Merge(buckets_.Finish(params, &m->exposed_comm_ms), Concurrency::kSerial, m);
      // Weights were written into the parameters in place; gradients are applied here.
      if (!weights_) m->compute_ms += ApplyGradients(received_);
      return nullptr;
    }
    buckets_.Seal(params);
    std::fill(settled_.begin(), settled_.end(), 0);
    done_ = SettledStep{};
    pending_ = true;
    return std::make_unique<Pending>(this);
  }

 private:
  // The pending step of cross-barrier: bucket by bucket as the next forward needs them.
  class Pending : public PendingStep {
   public:
    explicit Pending(PipelinedExchange* ex) : ex_(ex) {}
    ~Pending() override { ex_->Drop(); }  // a no-op once settled
    bool Settle(const torch::nn::Module* layer, SettledStep* done) override {
      return layer ? ex_->GateLayer(*layer) : ex_->SettleAll(done);
    }

   private:
    PipelinedExchange* ex_;
  };

  // Key's gradient from backward: the step's buckets begin at the first one. A backward
  // outside a step (between Finish and the next Prepare) is not ours.
  void Feed(size_t key, const torch::Tensor& grad) {
    if (!prepared_) return;
    Begin();
    buckets_.Gradient(key, grad);
  }
  void Begin() {
    if (begun_) return;
    GP_ENFORCE(!pending_, "the pipelined step began while step results are pending: Settle first");
    // Fresh aliases each step: restoring a checkpoint may give the parameters new storage.
    if (weights_) weights_out_ = Aliases();
    buckets_.Begin(step_, weights_ ? &weights_out_ : &received_, server_lr_,
                   server_key_lr_.empty() ? nullptr : &server_key_lr_);
    begun_ = true;
  }
  bool GateLayer(const torch::nn::Module& layer) {
    if (!pending_) return false;
    for (const auto& p : layer.parameters()) {
      const auto it = key_of_.find(p.unsafeGetTensorImpl());
      if (it != key_of_.end()) SettleBucket(buckets_.bucket_of(it->second));
    }
    return false;
  }
  bool SettleAll(SettledStep* done) {
    GP_ENFORCE(pending_, "no pending step to settle");
    for (size_t b = 0; b < split_.size(); ++b) SettleBucket(static_cast<int>(b));
    double waited = 0;
    pending_ = false;
    done_.stats = buckets_.Wait(&waited);  // every bucket has ended: only the sums are left
    done_.exposed_ms += waited;
    *done = done_;
    return true;
  }

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
      const auto [begin, end] = buckets_.keys(b);
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
  BucketScheduler buckets_;
  bool hooks_;
  std::unordered_map<const c10::TensorImpl*, size_t> key_of_;  // parameter -> key
  bool begun_ = false;         // the step's buckets began (at its first gradient)
  bool pending_ = false;       // cross-barrier: Finish ran, the step is not settled
  std::vector<char> settled_;  // per bucket, the pending step
  SettledStep done_;
};

}  // namespace

std::unique_ptr<Exchange> MakePipelinedExchange(ExchangeContext ctx, std::vector<int> split) {
  return std::make_unique<PipelinedExchange>(ctx, std::move(split));
}

}  // namespace gradpress::worker
