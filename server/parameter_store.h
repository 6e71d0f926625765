#pragma once
// ParameterStore: the parameter server's logic, without gRPC. It holds the model's tensors by
// key, registers workers, validates and aggregates their pushes per step, steps the server
// optimizer (exchange=weights) and encodes each step's result once with the pull codec. A
// facade over Membership, ModelState, Aggregation and Elections (server/store_state.h).
//
//   ParameterStore store(options);
//   auto r = store.Register({"worker-0", 1}, model_specs, config_hash);
//   store.InitWeights({"worker-0", 1}, initial_payloads);          // first worker wins
//   auto out = store.PushPull({"worker-0", 1}, step, pushes, deadline);  // sync: blocks
//
// Buckets: Register may split the model into buckets of consecutive keys (bucket_keys, model
// order; every worker the same split). A bucket completes a step as soon as every live worker
// pushed it, so a worker pulls bucket i while it pushes bucket i+1. step() is the number of
// steps every bucket completed; a push for a later step is refused, so buckets never drift
// more than one step apart, and checkpoints are taken only when all stand at the same step.
// No split = one bucket of the whole model, which async mode requires.
// Sync: a step completes when every live worker pushed it, and not before all `workers`
// registered (or worker_timeout_s passed since the first did); the mean is over the pushes
// received (a worker silent for worker_timeout_s is dropped, the mean renormalises; it may
// Register again). Async (exchange=weights only): each push is applied at once; one whose
// base step is more than max_staleness behind is refused.
// Every push and every set of weights is validated whole, by one check (server/
// payload_check.h), before any of it is applied: unknown worker (NotFound), stale incarnation
// or step, fingerprint mismatch (FailedPrecondition), wrong key or shape, undecodable payload,
// NaN or Inf (InvalidArgument) -- the error names the key and reason, the store is unchanged.
// A repeated (worker, incarnation, step) is acknowledged and never applied twice.
// Thread-safety: every method may be called concurrently (one gRPC thread per RPC). The one
// lock guards bookkeeping only: finalizing a bucket (SGD, pull encode), the async step,
// weights' decode and copy, and a checkpoint's copy, write and fsync run without it, owning
// the keys they touch (server/store_state.h), so Heartbeat, Register and Stats never wait
// for them.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/checkpoint.h"
#include "server/payload_check.h"
#include "server/store_state.h"

namespace gradpress::server {

class ParameterStore : private StoreState {
 public:
  explicit ParameterStore(StoreOptions options);
  ~ParameterStore();

  RegisterResult Register(const WorkerId& w, const std::vector<TensorSpec>& model,
                          const std::string& config_hash, const std::vector<int>& bucket_keys,
                          const ShardClaim& shard);
  RegisterResult Register(const WorkerId& w, const std::vector<TensorSpec>& model,
                          const std::string& config_hash, const std::vector<int>& bucket_keys = {});
  int buckets() const;  // of the registered split (1 without one)
  // True if these became the server's weights (the first call wins; a retry of the winning
  // call, same worker and incarnation, is answered true again and changes nothing).
  bool InitWeights(const WorkerId& w, const std::vector<KeyPayload>& weights);
  // The server's current weights, lossless ("none" codec), once their version (0 at init,
  // round + 1 after PublishWeights of that round) is at least min_version. Before the initial
  // weights: FailedPrecondition (not_initialized), or with wait_init a wait for them until
  // `deadline` (then Unavailable, timed_out; Stats().weights_waiting counts the waiters).
  std::shared_ptr<const StepResult> Weights(const WorkerId& w, int64_t min_version = 0,
                                            Clock::time_point deadline = Clock::now(),
                                            bool wait_init = false);
  // The momentum buffers of the shadow weights' SGD (the workers' optimizer state, sync
  // gradient methods with sync.every 1), lossless, for a worker that rejoins from Weights().
  // FailedPrecondition (not_initialized) where none are kept: no shadow weights, no momentum,
  // or no step yet.
  std::shared_ptr<const StepResult> ShadowMomentum(const WorkerId& w);
  // Method 6: waits until every live worker voted in `round`; returns the best rank
  // (highest score, ties to the lowest rank) and its score.
  std::pair<int, double> Elect(const WorkerId& w, int64_t round, double score,
                               Clock::time_point deadline);
  // The elected worker of `round` replaces the weights (FailedPrecondition for anyone else);
  // a repeat for a round already published is acknowledged and not applied again.
  void PublishWeights(const WorkerId& w, int64_t round, const std::vector<KeyPayload>& weights);

  // Broadcast (server/broadcasts.h): the root worker's piece [offset, offset + piece.size())
  // of name's value of `round` (total_bytes in all, at most max_broadcast_bytes); and, for the
  // others, name's whole value of `round`, waiting for it until `deadline` (then Unavailable,
  // timed_out). The errors of Broadcasts::Put and Find; never more than the newest round kept.
  void BroadcastPut(const WorkerId& w, const std::string& name, int64_t round, uint64_t total_bytes,
                    uint64_t offset, std::string_view piece);
  std::shared_ptr<const std::string> BroadcastGet(const WorkerId& w, const std::string& name,
                                                  int64_t round, Clock::time_point deadline);

  // Sync: applies the push to `step` and waits (until `deadline`) for the step's result.
  // Async: applies it (base_step = the step of the weights it was computed on) and returns
  // the current weights. wait=false (the Push RPC): returns once applied, with a null result
  // in sync mode. lr (exchange=weights): the learning rate of the server's SGD step this push
  // completes (sync uses the last push's); unset = options' sgd.lr. bucket: which bucket the
  // push carries (-1: the whole model, only without a split); its result holds its keys.
  // key_lr: per key of the push's bucket (model order), the lr replacing `lr` for that key
  // (param groups); empty: `lr` for all.
  PushPullResult PushPull(const WorkerId& w, int64_t step, int64_t base_step,
                          std::vector<KeyPayload> pushes, Clock::time_point deadline,
                          bool wait = true, std::optional<double> lr = std::nullopt,
                          int bucket = -1, std::vector<double> key_lr = {});
  // The same push streamed in pieces (the service's path, parameter_store_push.cc):
  //   auto s = store.BeginPush(w, step, base_step, deadline);   // worker, step, duplicate
  //   s->Add(piece, bytes) ...;  PushPullResult r = s->Commit(wait);
  // Each key's bytes arrive in order, in pieces of any size. "none" bytes are checked and
  // copied as they arrive into a reused buffer (the accumulator itself for a step's first
  // push, else a staging buffer added at Commit); other codecs are collected and decoded at
  // Commit, a sparse one (sync) to indices and values added in O(payload). Errors are thrown
  // as PushPull's, naming the key; a session destroyed before Commit leaves the store
  // unchanged. A duplicate's pieces are ignored.
  using Piece = PayloadPiece;
  class PushSession {
   public:
    ~PushSession();
    void Add(const Piece& piece, std::string_view bytes);
    PushPullResult Commit(bool wait = true);
    using State = PushState;  // server/push_session.h

   private:
    friend class ParameterStore;
    explicit PushSession(std::unique_ptr<State> s);
    std::unique_ptr<State> s_;
  };
  std::unique_ptr<PushSession> BeginPush(const WorkerId& w, int64_t step, int64_t base_step,
                                         Clock::time_point deadline,
                                         std::optional<double> lr = std::nullopt, int bucket = -1,
                                         std::vector<double> key_lr = {});
  // Sync: the result of `step`, waiting for it until `deadline` (step -1: the newest now);
  // bucket -1: every bucket's keys. Async: the current weights.
  std::shared_ptr<const StepResult> Pull(const WorkerId& w, int64_t step,
                                         Clock::time_point deadline, int bucket = -1);
  int64_t Heartbeat(const WorkerId& w);  // marks the worker alive; returns the server step

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
  std::vector<TensorSpec> model() const;  // the registered model (empty before Register)

  // Checkpoints (parameter_store_checkpoint.cc), taken between steps: what a restarted server
  // needs to go on exactly -- step, weights and their version, model and config hash, per key
  // the optimizer's momentum and the pull codec's state (residual, RNG), and the members.
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
};

}  // namespace gradpress::server
