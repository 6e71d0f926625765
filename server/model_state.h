#pragma once
// ModelState: the server's copy of the model -- per key its weights, the open step's
// accumulator, the optimizer state (server SGD or the shadow weights) and the pull codec with
// its error feedback -- plus the model's fingerprint, whether and by whom it was initialised,
// the weights' version (method 6), and the encoding of results. Owned by ParameterStore
// (server/store_state.h); ParallelFor work on keys runs on the store's pool.
//
//   ModelState m(options, &pool);
//   m.Set(specs, config_hash);                    // the first Register
//   auto ordered = m.Validate(pushes, reject);    // whole push checked, nothing applied
//   m.DecodeWeights(ordered);                     // InitWeights / PublishWeights
//   auto r = m.Encode(step, /*weights=*/true, /*lossless=*/true, 0, m.size(), 1.f, nullptr);
// Thread-safety: Decoder, Validate and the const readers of the fingerprint may be called
// from several threads at once. The keys' contents are worked on outside the store's lock by
// whoever holds them (server/key_holds.h: a lane's finalize, a reader, a writer; the
// accumulator rows by the lane's pushes); everything else is under the store's lock.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "common/checkpoint.h"
#include "common/thread_pool.h"
#include "server/sparse_accum.h"
#include "server/store_types.h"

namespace gradpress::server {

struct KeyState {
  int64_t numel = 0;
  std::vector<float> weights;
  std::vector<float> accum;                // sum of the open step's pushes
  std::unique_ptr<std::mutex[]> block_mu;  // one per kBlock elements of accum
  SignedZeros zeros;  // where accum may hold -0.0 (sparse pushes add in O(payload) with it)
  SgdState sgd;
  std::unique_ptr<compressors::Compressor> pull;  // pull codec with its own error feedback
};

class ModelState {
 public:
  // Big keys are split into blocks of kBlock elements: the unit of parallel work.
  static constexpr int64_t kBlock = 1 << 20;
  // Counts a refused push by reason ("bad_key_or_shape", "undecodable", "non_finite").
  using Reject = std::function<void(const char* reason)>;

  ModelState(const StoreOptions& options, ThreadPool* pool);

  void Set(const std::vector<TensorSpec>& model, const std::string& config_hash);
  void Clear();
  bool empty() const { return model_.empty(); }
  size_t size() const { return model_.size(); }
  const std::vector<TensorSpec>& specs() const { return model_; }
  const TensorSpec& spec(size_t i) const { return model_[i]; }
  KeyState& key(size_t i) const { return *keys_[i]; }
  const std::string& config_hash() const { return config_hash_; }
  // Index of `key`, or -1.
  int64_t Index(const std::string& key) const;
  // A decoder for `codec`, cached (throws as compressors::MakeDecoder for an unknown one).
  const compressors::Compressor& Decoder(const std::string& codec);

  // Every key present once, with its shape; every payload decodes to finite numbers: the
  // checks of a push (server/payload_check.h). Throws InvalidArgument naming the key (after
  // counting the reason); returns the model order.
  std::vector<const compressors::Payload*> Validate(const std::vector<KeyPayload>& pushes,
                                                    const Reject& reject);
  // Replaces the weights by validated payloads (model order).
  void DecodeWeights(const std::vector<const compressors::Payload*>& ordered);
  // (key, begin, end) element ranges of at most kBlock over keys [first, last).
  std::vector<std::tuple<size_t, int64_t, int64_t>> Blocks(size_t first, size_t last) const;
  // A fresh result of keys [first, last) of the weights, or of the accumulator times `scale`
  // (the mean), lossless or with the pull codec; `spare` (may be null) recycles buffers.
  std::shared_ptr<StepResult> Encode(int64_t step, bool weights, bool lossless, size_t first,
                                     size_t last, float scale, std::vector<std::string>* spare);
  // The shadow SGD's momentum buffers, lossless, model order; null if a key has none yet.
  std::shared_ptr<StepResult> EncodeMomentum(int64_t step) const;
  // Async: the weights of `step` with the pull codec, encoded once per server step (Encode,
  // by the step's writer) and kept here; null if those kept are of another step.
  std::shared_ptr<const StepResult> AsyncWeights(int64_t step) const;
  // Keeps r; returns the weights kept before (for the caller to free without the lock).
  std::shared_ptr<const StepResult> KeepAsyncWeights(std::shared_ptr<const StepResult> r);
  // Index of the first NaN or Inf in x[0, n), or -1.
  static int64_t FirstNonFinite(const float* x, int64_t n);
  // Key i's pull codec sends the float32 values themselves (Compressor::IsLossless).
  bool PullIsNone(size_t i) const;

  // Initialisation (InitWeights: the first call wins) and method 6's weights version.
  bool initialized = false;
  WorkerId initialized_by;
  int64_t weights_version = 0;  // 0 at init, round + 1 after PublishWeights

  // Checkpoint sections "weights/<key>", "momentum/<key>", "pull/<key>".
  void Save(Checkpoint* c) const;
  // Fills the keys of a Set model from a checkpoint; InvalidArgument naming the key if one
  // does not fit (the state is then undefined: Clear it).
  void Load(const Checkpoint& c, const std::string& context);

 private:
  const StoreOptions& opt_;
  ThreadPool* pool_;
  std::vector<TensorSpec> model_;
  std::map<std::string, size_t> key_index_;
  std::vector<std::unique_ptr<KeyState>> keys_;
  std::vector<char> pull_none_;  // per key: PullIsNone
  std::string config_hash_;
  std::shared_ptr<const StepResult> weights_result_;  // AsyncWeights' cache
  std::mutex decoders_mu_;
  std::map<std::string, std::unique_ptr<compressors::Compressor>> decoders_;
};

}  // namespace gradpress::server
