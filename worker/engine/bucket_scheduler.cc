// BucketScheduler: the pipelined step's buckets on their threads (bucket_scheduler.h).
#include "worker/engine/bucket_scheduler.h"

#include <torch/torch.h>

#include <algorithm>

#include "common/error.h"
#include "common/timer.h"
#include "worker/client/device_codecs.h"

namespace gradpress::worker {

std::vector<int> BucketScheduler::Split(const std::vector<torch::Tensor>& params,
                                        double bucket_mb) {
  GP_ENFORCE(bucket_mb > 0, "sync.bucket_mb must be > 0, got ", bucket_mb);
  const double limit = bucket_mb * (1 << 20);
  std::vector<int> reversed;  // from the last key
  int keys = 0;
  double bytes = 0;
  for (size_t i = params.size(); i-- > 0;) {
    ++keys;
    bytes += 4.0 * static_cast<double>(params[i].numel());
    if (bytes >= limit) {
      reversed.push_back(keys);
      keys = 0;
      bytes = 0;
    }
  }
  if (keys > 0) reversed.push_back(keys);
  return {reversed.rbegin(), reversed.rend()};
}

class BucketScheduler::Turn : public Uplink {
 public:
  Turn(BucketScheduler* ex, int bucket) : ex_(ex), bucket_(bucket) {}
  void Acquire() override {
    std::unique_lock<std::mutex> lock(ex_->mu_);
    ex_->uplink_waiting_.insert(bucket_);
    ex_->cv_.wait(lock,
                  [&] { return !ex_->uplink_busy_ && *ex_->uplink_waiting_.begin() == bucket_; });
    ex_->uplink_waiting_.erase(bucket_);
    ex_->uplink_busy_ = true;
    held_ = true;
  }
  void Release() override {
    std::lock_guard<std::mutex> lock(ex_->mu_);
    if (!held_) return;
    held_ = false;
    ex_->uplink_busy_ = false;
    ex_->cv_.notify_all();
  }

 private:
  BucketScheduler* ex_;
  int bucket_;
  bool held_ = false;
};

BucketScheduler::BucketScheduler(PsClient* client, const std::vector<int>& bucket_keys, int threads)
    : client_(client), pending_init_(bucket_keys) {
  GP_ENFORCE(!bucket_keys.empty(), "BucketScheduler needs at least one bucket");
  for (size_t b = 0; b < bucket_keys.size(); ++b) {
    keys_.emplace_back(bucket_of_.size(), bucket_of_.size() + bucket_keys[b]);
    for (int k = 0; k < bucket_keys[b]; ++k) bucket_of_.push_back(static_cast<int>(b));
  }
  grads_.resize(bucket_of_.size());
  for (size_t b = 0; b < bucket_keys.size(); ++b) {
    ready_.push_back(std::make_unique<CudaMark>());
    decoded_.push_back(std::make_unique<DecodeChecks>());
  }
  ended_.assign(bucket_keys.size(), 0);
  for (int t = 0; t < std::max(1, threads); ++t) threads_.emplace_back([this] { Run(); });
}

BucketScheduler::~BucketScheduler() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    queue_.clear();
    cv_.wait(lock, [&] { return outstanding_ == static_cast<int>(queue_.size()); });
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void BucketScheduler::Begin(int64_t step, std::vector<torch::Tensor>* out, std::optional<double> lr,
                            const std::vector<double>* key_lr) {
  std::lock_guard<std::mutex> lock(mu_);
  GP_ENFORCE(outstanding_ == 0, "BucketScheduler::Begin while a step is in flight");
  step_ = step;
  lr_ = lr;
  key_lr_ = key_lr;
  out_ = out;
  pending_ = pending_init_;
  std::fill(ended_.begin(), ended_.end(), 0);
  for (auto& g : grads_) g = torch::Tensor();
  sum_ = StepMetrics{};
  error_ = nullptr;
  for (auto& d : decoded_) d->Clear();  // a dropped step's, never used
  active_ = true;
}

void BucketScheduler::Gradient(size_t key, const torch::Tensor& grad) {
  if (!active_) return;  // a backward outside a step (evaluation probes): not ours
  GP_ENFORCE(key < grads_.size(), "BucketScheduler: key ", key, " outside the model");
  std::lock_guard<std::mutex> lock(mu_);
  if (grads_[key].defined()) return;  // a second contribution would change a sent gradient
  grads_[key] = grad;
  if (--pending_[bucket_of_[key]] == 0) Enqueue(bucket_of_[key]);
}

void BucketScheduler::Enqueue(int bucket) {
  // On the thread that handed over the bucket's last gradient, right after its work was queued.
  const auto [begin, end] = keys_[bucket];
  bool cuda = false;
  for (size_t i = begin; i < end; ++i) cuda = cuda || grads_[i].is_cuda();
  if (cuda) {
    ready_[bucket]->Record();
  } else {
    ready_[bucket]->Reset();
  }
  queue_.push_back(bucket);
  ++outstanding_;
  cv_.notify_all();
}

StepMetrics BucketScheduler::Finish(const std::vector<torch::Tensor>& like, double* exposed_ms) {
  Seal(like);
  return Wait(exposed_ms);
}

void BucketScheduler::Seal(const std::vector<torch::Tensor>& like) {
  GP_ENFORCE(active_, "BucketScheduler::Seal without Begin");
  std::lock_guard<std::mutex> lock(mu_);
  // Keys without a gradient (unused parameters): zeros, in reverse order like backward.
  for (size_t i = grads_.size(); i-- > 0;) {
    if (grads_[i].defined()) continue;
    grads_[i] = torch::zeros_like(like[i]);
    if (--pending_[bucket_of_[i]] == 0) Enqueue(bucket_of_[i]);
  }
}

bool BucketScheduler::WaitBucket(int bucket) {
  GP_ENFORCE(active_ && bucket >= 0 && bucket < buckets(), "BucketScheduler::WaitBucket(", bucket,
             ") outside a step");
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return ended_[bucket] || error_ != nullptr; });
  if (error_) return false;
  lock.unlock();
  return CheckDecoded(bucket);
}

bool BucketScheduler::CheckDecoded(int bucket) {
  try {
    decoded_[bucket]->Check();
    return true;
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
    return false;
  }
}

StepMetrics BucketScheduler::Wait(double* exposed_ms) {
  GP_ENFORCE(active_, "BucketScheduler::Wait without Begin");
  Timer waited;
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return outstanding_ == 0; });
  lock.unlock();
  // Every bucket has ended: what the device decodes found, before anything uses the results.
  for (int b = 0; b < buckets(); ++b)
    if (!CheckDecoded(b)) break;
  lock.lock();
  active_ = false;
  if (exposed_ms) *exposed_ms = waited.ElapsedMs();
  for (auto& g : grads_) g = torch::Tensor();  // the autograd buffers are free again
  if (error_) std::rethrow_exception(error_);
  return sum_;
}

void BucketScheduler::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    // Threads take buckets in readiness order, which backward makes the same on every
    // worker: the buckets in flight are then the same everywhere, and the server completes
    // them (in a priority order per worker, more threads than buckets could wait forever).
    const int bucket = queue_.front();
    queue_.pop_front();
    StepCall call;
    call.step = step_;
    call.bucket = bucket;
    call.lr = lr_;
    call.key_lr = key_lr_;
    call.ready = ready_[bucket].get();
    call.decoded = decoded_[bucket].get();
    std::vector<torch::Tensor>* out = out_;
    // The bucket's gradients (the training thread goes on filling other keys of grads_).
    const auto [begin, end] = keys_[bucket];
    std::vector<torch::Tensor> grads(grads_.size());
    for (size_t i = begin; i < end; ++i) grads[i] = grads_[i];
    const bool failed = error_ != nullptr;
    Turn turn(this, bucket);
    lock.unlock();
    StepMetrics st;
    std::exception_ptr error;
    if (!failed) {  // after a failure the others are not sent: Finish rethrows it
      try {
        call.uplink = &turn;
        st = client_->PushPull(call, grads, out);
      } catch (...) {
        error = std::current_exception();
      }
    }
    turn.Release();  // if the call ended (or never ran) holding it
    lock.lock();
    ended_[bucket] = 1;
    if (error && !error_) error_ = error;
    Merge(st, Concurrency::kSerial, &sum_);
    --outstanding_;
    cv_.notify_all();
  }
}

}  // namespace gradpress::worker
