#pragma once
// BucketScheduler: the pipelined step's buckets (methods 1-5, sync mode, sync.every 1; the
// Exchange that drives it is pipelined_exchange.cc). The model is split into buckets of
// consecutive keys of about sync.bucket_mb each, formed in reverse parameter order (the order
// backward produces gradients; a key larger than a bucket is a bucket of its own). Each bucket
// is handed to a communication thread as soon as all of its gradients exist -- from autograd
// hooks on the parameters while backward still runs (sync.overlap) -- and exchanged with
// PsClient::PushPull for that bucket: encoded, pushed, completed by the server once every live
// worker pushed it, pulled and decoded into the caller's tensors, while later buckets are still
// being produced and pushed. Codecs and their state stay per key, so the split changes no
// codec's math: the weights are bit-identical to the serial step.
// Priority (BytePS): of the buckets waiting for the uplink, the one nearest the model's input
// goes first, so the first layers' results, which the next forward needs first, are not
// queued behind later layers' (cross-barrier, exchange.h).
//
//   auto split = BucketScheduler::Split(params, config.sync.bucket_mb);   // keys per bucket
//   client.Register(specs, split);
//   BucketScheduler ex(&client, split, /*threads=*/3);
//   ex.Begin(step, &out, lr);                 // before backward
//   ... ex.Gradient(i, grad) from each parameter's hook (or after backward) ...
//   StepMetrics s = ex.Finish(like);          // after backward: waits for every bucket
//   // or: ex.Seal(like); ... ex.WaitBucket(b) as the next forward needs bucket b ...; ex.Wait();
//
// Finish sums the buckets' bytes and times (encode, decode, network and wait are summed over
// buckets, so they may exceed the wall time they overlap), fills keys that got no gradient
// with zeros, and rethrows the first bucket's error (the same gradpress::Error type) once
// every bucket has ended.
// Thread-safety: Begin and Finish on the training thread; Gradient from the hooks, on the
// thread autograd runs them on (for CPU tensors the one that called backward, for CUDA tensors
// autograd's device thread), between Begin and the end of backward, under mu_; the exchange
// itself runs on its own threads.
#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <utility>
#include <vector>

#include "worker/client/ps_client.h"

namespace gradpress::worker {

class BucketScheduler {
 public:
  // Keys per bucket in model order for tensors `params` (model order), grouping from the last
  // key backwards until a bucket holds at least bucket_mb MiB of float32.
  static std::vector<int> Split(const std::vector<torch::Tensor>& params, double bucket_mb);

  BucketScheduler(PsClient* client, const std::vector<int>& bucket_keys, int threads);
  ~BucketScheduler();
  BucketScheduler(const BucketScheduler&) = delete;
  BucketScheduler& operator=(const BucketScheduler&) = delete;

  int buckets() const { return static_cast<int>(pending_init_.size()); }
  int bucket_of(size_t key) const { return bucket_of_.at(key); }
  std::pair<size_t, size_t> keys(int bucket) const { return keys_.at(bucket); }  // [begin, end)
  // Starts a step: the results will be written into `out` (the whole model, model order);
  // lr, key_lr: the server's SGD lr for the step (StepCall::lr, StepCall::key_lr: null for
  // none; it outlives the step).
  void Begin(int64_t step, std::vector<torch::Tensor>* out, std::optional<double> lr,
             const std::vector<double>* key_lr = nullptr);
  // Key i's gradient for this step (held, not copied: it must not change until Finish).
  // The bucket goes out once all of its keys have one.
  void Gradient(size_t key, const torch::Tensor& grad);
  // Waits for every bucket; keys that got no gradient are exchanged as zeros of `like`'s
  // shapes first. Returns the summed stats; exposed_ms is the wait here.
  StepMetrics Finish(const std::vector<torch::Tensor>& like, double* exposed_ms = nullptr);
  // Finish in parts: Seal hands over the keys that got no gradient (zeros of like's shapes);
  // WaitBucket(b) returns once bucket b ended and its device decodes are checked (false if it
  // or an earlier one failed: Wait then rethrows); Wait is the rest of Finish.
  void Seal(const std::vector<torch::Tensor>& like);
  bool WaitBucket(int bucket);
  StepMetrics Wait(double* exposed_ms = nullptr);
  bool active() const { return active_; }

 private:
  void Run();
  void Enqueue(int bucket);  // mu_ held
  // Runs the bucket's deferred decode checks; a failure becomes error_ (false). mu_ not held.
  bool CheckDecoded(int bucket);
  // The uplink, one bucket at a time (each push gets the whole link and finishes early, and is
  // pulled while later ones go up), the waiting bucket with the lowest index first.
  class Turn;
  std::set<int> uplink_waiting_;  // mu_
  bool uplink_busy_ = false;      // mu_

  PsClient* client_;
  std::vector<int> bucket_of_;                   // per key
  std::vector<std::pair<size_t, size_t>> keys_;  // per bucket: keys [begin, end)
  std::vector<int> pending_init_;                // keys per bucket
  std::vector<int> pending_;                     // keys still missing per bucket, this step
  std::vector<torch::Tensor> grads_;
  // Per bucket: where backward completed its CUDA gradients this step (StepCall::ready).
  std::vector<std::unique_ptr<CudaMark>> ready_;
  // Per bucket: its device decodes' checks, run before its results are used (StepCall::decoded).
  std::vector<std::unique_ptr<DecodeChecks>> decoded_;
  std::vector<torch::Tensor>* out_ = nullptr;
  int64_t step_ = 0;
  std::optional<double> lr_;
  const std::vector<double>* key_lr_ = nullptr;  // Begin's (the exchange's, for the step)
  bool active_ = false;

  std::mutex mu_;
  std::condition_variable cv_;  // work queued, a bucket done, or stop
  std::deque<int> queue_;       // buckets ready to go, in readiness order
  std::vector<char> ended_;     // per bucket, this step: exchanged (or given up after an error)
  int outstanding_ = 0;         // buckets queued or in flight
  StepMetrics sum_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace gradpress::worker
