#pragma once
// ParameterStore: the parameter server's logic, without gRPC. It holds the model's tensors by
// key, registers workers, validates and aggregates their pushes per step, steps the server
// optimizer (exchange=weights) and encodes each step's result once with the pull codec. It is
// a facade over four parts: Membership (membership.h), ModelState (model_state.h),
// Aggregation (aggregation.h: per-bucket steps) and Elections (elections.h).
//
//   ParameterStore store(options);
//   auto r = store.Register({"worker-0", 1}, model_specs, config_hash);
//   store.InitWeights({"worker-0", 1}, initial_payloads);          // first worker wins
//   auto out = store.PushPull({"worker-0", 1}, step, pushes, deadline);  // sync: blocks
//
// Buckets (the pipelined step): Register may split the model into buckets of consecutive keys
// (bucket_keys: keys per bucket, model order; every worker must send the same split). Each
// bucket completes a step on its own as soon as every live worker has pushed that bucket
// (per-bucket completion), so a worker can pull bucket i while it still pushes bucket i+1.
// The server step (step()) is the number of steps every bucket has completed; a push for a
// later step than that is refused, so buckets never drift more than one step apart, and
// checkpoints are taken only when all buckets stand at the same step. No split = one bucket
// holding the whole model (the serial step), which async mode requires.
// Sync: a step completes when every live worker has pushed it, and not before all `workers`
// have registered (or worker_timeout_s has passed since the first did); the mean is taken
// over the pushes received (a worker silent for worker_timeout_s is dropped and the mean
// renormalises; it may Register again and rejoin). Async (exchange=weights only): each push
// is applied at once; one whose base step is more than max_staleness behind is refused.
// Every push is validated whole before any of it is applied: unknown worker (NotFound),
// stale incarnation or step, fingerprint mismatch (FailedPrecondition), wrong key or shape,
// undecodable payload, NaN or Inf (InvalidArgument) -- the error names the key and reason and
// the store is left unchanged. A repeated (worker, incarnation, step) is acknowledged and
// never applied twice. Pushes are decoded straight into one accumulator per key, never kept
// per worker beyond their (compressed) payload bytes.
// Thread-safety: every method may be called concurrently (one gRPC thread per RPC).
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/checkpoint.h"
#include "common/thread_pool.h"
#include "server/aggregation.h"
#include "server/elections.h"
#include "server/membership.h"
#include "server/model_state.h"
#include "server/store_types.h"

namespace gradpress::server {

class ParameterStore {
 public:
  explicit ParameterStore(StoreOptions options);
  ~ParameterStore();

  RegisterResult Register(const WorkerId& w, const std::vector<TensorSpec>& model,
                          const std::string& config_hash, const std::vector<int>& bucket_keys,
                          const ShardClaim& shard);
  RegisterResult Register(const WorkerId& w, const std::vector<TensorSpec>& model,
                          const std::string& config_hash, const std::vector<int>& bucket_keys = {});
  // Buckets of the registered split (1 without one).
  int buckets() const;
  // Returns true if these became the server's weights (the first call wins; a retry of the
  // winning call, same worker and incarnation, is answered true again and changes nothing).
  bool InitWeights(const WorkerId& w, const std::vector<KeyPayload>& weights);
  // The server's current weights, lossless ("none" codec), once their version (0 at init,
  // round + 1 after PublishWeights of that round) is at least min_version.
  std::shared_ptr<const StepResult> Weights(const WorkerId& w, int64_t min_version = 0,
                                            Clock::time_point deadline = Clock::now());
  // Method 6: waits until every live worker voted in `round`; returns the best rank
  // (highest score, ties to the lowest rank) and its score.
  std::pair<int, double> Elect(const WorkerId& w, int64_t round, double score,
                               Clock::time_point deadline);
  // The elected worker of `round` replaces the weights (FailedPrecondition for anyone else);
  // a repeat for a round already published is acknowledged and not applied again.
  void PublishWeights(const WorkerId& w, int64_t round, const std::vector<KeyPayload>& weights);

  // Sync: applies the push to `step` and waits (until `deadline`) for the step's result.
  // Async: applies it (base_step = the step of the weights it was computed on) and returns
  // the current weights.
  // wait=false (the Push RPC): returns once applied, with a null result in sync mode.
  // lr (exchange=weights): the learning rate of the server's SGD step this push completes
  // (the workers' schedule; sync uses the last push's); unset = options' sgd.lr.
  PushPullResult PushPull(const WorkerId& w, int64_t step, int64_t base_step,
                          std::vector<KeyPayload> pushes, Clock::time_point deadline,
                          bool wait = true, std::optional<double> lr = std::nullopt,
                          int bucket = -1);
  // The same push streamed in pieces (the service's path, parameter_store_push.cc):
  //   auto s = store.BeginPush(w, step, base_step, deadline);   // worker, step, duplicate
  //   s->Add(piece_header, bytes) ...;  PushPullResult r = s->Commit(wait);
  // Each key's payload bytes arrive in order, in pieces of any size. "none" bytes are
  // checked and copied as they arrive into a reused buffer (the open step's accumulator
  // itself for the first push of a step, else a staging buffer added at Commit), so a push
  // is never held whole; other codecs are collected and decoded at Commit, a sparse one
  // (sync) to its indices and values, added into the accumulator in O(payload). Errors are
  // thrown as PushPull's, naming the key; a session destroyed before Commit (an error, a
  // broken stream) leaves the store unchanged. A duplicate's pieces are ignored.
  struct Piece {
    std::string_view key, codec;
    std::vector<int64_t> shape;  // dense shape, as on every chunk of the key
    uint32_t dtype = 0;          // compressors::DType code
    uint64_t total_bytes = 0;    // the key's whole payload
    uint64_t offset = 0;         // of these bytes in the payload
  };
  class PushSession {
   public:
    ~PushSession();
    void Add(const Piece& piece, std::string_view bytes);
    PushPullResult Commit(bool wait = true);
    struct State;  // parameter_store_push.cc

   private:
    friend class ParameterStore;
    explicit PushSession(std::unique_ptr<State> s);
    std::unique_ptr<State> s_;
  };
  // bucket: which bucket the push carries (-1: the whole model, only without a split); its
  // result holds that bucket's keys.
  std::unique_ptr<PushSession> BeginPush(const WorkerId& w, int64_t step, int64_t base_step,
                                         Clock::time_point deadline,
                                         std::optional<double> lr = std::nullopt, int bucket = -1);
  // Sync: the result of `step`, waiting for it until `deadline` (step -1: the newest now);
  // bucket -1: every bucket's keys. Async: the current weights.
  std::shared_ptr<const StepResult> Pull(const WorkerId& w, int64_t step,
                                         Clock::time_point deadline, int bucket = -1);
  // Marks the worker alive; returns the server step.
  int64_t Heartbeat(const WorkerId& w);

  // Drops workers silent for longer than worker_timeout_s; completes a step they blocked.
  void CheckTimeouts();
  // Wakes every waiter with Unavailable; later pushes are refused.
  void Shutdown();
  void CountBytesOut(uint64_t bytes);
  // The transport's counters: a call refused before the store saw it (e.g. "unauthenticated"),
  // and an injected fault (transport/fault_injection.h).
  void CountRejected(const std::string& reason) { Reject(reason); }
  void CountFaultInjected();
  StoreStats Stats() const;
  int64_t step() const;
  // The workers this server knows, by name (a copy; the dashboard's worker table).
  std::map<std::string, Member> Members() const;
  // The registered model (empty before the first Register).
  std::vector<TensorSpec> model() const;

  // Checkpoints (parameter_store_checkpoint.cc). A checkpoint is taken between steps and
  // holds what a restarted server needs to go on exactly: step, weights and their version,
  // the model and config hash, and per key the optimizer's momentum and the pull codec's
  // state (error-feedback residual, RNG), and the members. Workers re-register after a
  // restart (see RestoreCheckpoint).
  // With checkpoint_dir set, one is written every checkpoint_every completed steps.
  Checkpoint SaveCheckpoint() const;
  // Writes a checkpoint of the current step into checkpoint_dir unless one exists for it
  // (SIGTERM); returns its path ("" without a checkpoint_dir or before the model is known).
  std::string WriteCheckpoint();
  // Restores a checkpoint into a store no worker has registered with yet (FailedPrecondition
  // otherwise; InvalidArgument naming the file and key if it does not fit itself). The
  // members (name, incarnation, rank) come back as restored: each must Register again (its
  // other calls are refused with "register again"), keeps its rank, is refused with an older
  // incarnation, and steps wait for all of them (or worker_timeout_s after the first returns).
  void RestoreCheckpoint(const Checkpoint& c);

 private:
  // The store is a facade over four parts, all guarded by mu_ (one lock: a step's completion
  // touches membership, aggregation and model state at once):
  //   members_   who registered, who is live (server/membership.h)
  //   model_     weights, accumulators, optimizer and pull-codec state (server/model_state.h)
  //   agg_       per-bucket step aggregation and results (server/aggregation.h); the streamed
  //              pushes that fill it are in parameter_store_push.cc
  //   elections_ method 6's votes (server/elections.h)
  Member& CheckWorker(const WorkerId& w);  // mu_ held
  void Reject(const std::string& reason);  // counts; mu_ not held
  ModelState::Reject Rejecter() {
    return [this](const char* reason) { Reject(reason); };
  }
  // Sharded servers: a shard restarted behind the job (ShardClaim.catch_up_step) waits until
  // every worker has asked (or worker_timeout_s), then goes to the earliest step asked and
  // waits for a worker's weights; a worker asking a later step returns once they are in.
  // Once, and only before it completes a step. Waits on `lock`.
  void CatchUp(std::unique_lock<std::mutex>* lock, const WorkerId& w, int64_t step);
  // The first Register's model; mu_ held.
  void SetModel(const std::vector<TensorSpec>& model, const std::string& config_hash);
  void MaybeFinalize(Lane& lane);  // mu_ held
  void MaybeFinalizeAll();         // mu_ held
  void MaybeCheckpoint();          // mu_ held: every checkpoint_every steps
  Checkpoint SaveCheckpointLocked() const;
  std::string WriteCheckpointLocked();
  // Where a streamed push lands (parameter_store_landing.cc). Sync: the accumulator itself for
  // the lane's first push of a step (TryOwn); a later push's sparse keys are added into it
  // from their indices and values, its dense keys through a staging buffer taken when the
  // first of them arrives (EnsureTarget). Async: a staging buffer. Staging buffers are
  // allocated once per lane and reused, at most kMaxStaging, so memory does not grow with the
  // number of workers; a push that finds none free waits for one (until its deadline).
  static constexpr int kMaxStaging = 1;
  bool TryOwn(PushSession::State& s);                                             // mu_ held
  void AcquireTarget(PushSession::State& s, std::unique_lock<std::mutex>& lock);  // mu_ held
  void EnsureTarget(PushSession::State& s);                                       // takes mu_
  void ReleaseTarget(PushSession::State& s);                                      // mu_ held
  // Adds a later push into the accumulator under the lane's add_mu; mu_ not held.
  void AddToAccumulator(PushSession::State& s);
  // Sync: lands the push in the accumulator (swapped or added), counts it, may finalize.
  PushPullResult CommitSync(PushSession::State& s, bool wait);
  PushPullResult AsyncPush(const WorkerId& w, int64_t step, int64_t base_step,
                           const std::vector<float*>& grads, uint64_t bytes,
                           std::optional<double> lr);

  const StoreOptions opt_;
  ThreadPool pool_;
  mutable std::mutex mu_;
  std::condition_variable step_cv_;
  bool shutdown_ = false;
  Membership members_;
  ModelState model_;
  Aggregation agg_;
  Elections elections_;
  int64_t step_ = 0;             // steps every lane completed (sync: the open step)
  uint64_t placement_hash_ = 0;  // the first registration's (sharded servers)
  bool placement_set_ = false;
  int64_t last_checkpoint_step_ = -1;
  int64_t started_at_ = 0;  // the step this process started or was restored at
  std::map<std::string, int64_t> catch_up_asks_;  // CatchUp: each worker's step
  Clock::time_point catch_up_first_;
  bool catch_up_done_ = false;
  StoreStats stats_;
  double total_server_ms_ = 0;
};

}  // namespace gradpress::server
