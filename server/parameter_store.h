#pragma once
// ParameterStore: the parameter server's logic, without gRPC. It holds the model's tensors by
// key, registers workers, validates and aggregates their pushes per step, steps the server
// optimizer (exchange=weights) and encodes each step's result once with the pull codec.
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
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/checkpoint.h"
#include "common/thread_pool.h"
#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "server/sgd.h"

namespace gradpress::server {

using Clock = std::chrono::steady_clock;

using compressors::KeyPayload;
using compressors::TensorSpec;

struct WorkerId {
  std::string name;
  uint64_t incarnation = 0;
};

struct StoreOptions {
  int workers = 2;                     // workers expected to register
  bool async = false;                  // sync barrier, or apply each push at once
  bool exchange_weights = false;       // server steps SGD and returns weights (methods 1-2)
  SgdOptions sgd;                      // used when exchange_weights
  compressors::CompressorConfig pull;  // codec (+ error feedback) of what the server returns
  int64_t min_numel = 1024;            // smaller tensors travel uncompressed
  bool skip_1d = false;                // 1-D tensors (bias, BN) travel uncompressed
  int stats_every = 100;               // steps between counter log lines; 0 = never
  double worker_timeout_s = 30;        // silence after which a worker leaves the barrier
  int max_staleness = 4;               // async: steps a push's base may lag
  int threads = 2;                     // keys decoded / encoded in parallel
  std::string checkpoint_dir;          // "" = no checkpoints
  int64_t checkpoint_every = 0;        // server steps between checkpoints; 0 = on Stop only
  int checkpoint_keep = 3;             // newest checkpoint files kept
  int64_t max_model_bytes = int64_t{4096} << 20;  // a larger first Register is refused
  // Sync gradient methods: also step these weights with shadow_sgd on each step's mean (the
  // workers' own update: their optimizer, or lr 1 for method 6's averaged deltas), so that
  // Weights() serves what the workers hold -- a lone restarted worker pulls it.
  bool shadow_weights = false;
  SgdOptions shadow_sgd;  // its lr is replaced by a push's lr when one is sent
};

struct RegisterResult {
  int rank = 0;
  int world_size = 0;
  int64_t server_step = 0;
  bool initialized = false;
};

// One step's result, encoded once and shared by every worker that asks for it.
struct StepResult {
  int64_t step = 0;                  // the step this result completes (its index, 0-based)
  int contributors = 0;              // pushes averaged into it
  double server_ms = 0;              // time to finalize (mean, optimizer, encode)
  std::vector<KeyPayload> payloads;  // model order
  uint64_t PayloadBytes() const;
};

struct PushPullResult {
  std::shared_ptr<const StepResult> result;
  double wait_ms = 0;      // time this push waited for the other workers
  double apply_ms = 0;     // validate + decode + accumulate
  bool duplicate = false;  // the push had been applied before
};

struct StoreStats {
  int64_t steps = 0;
  uint64_t bytes_in = 0;   // payload bytes of applied pushes
  uint64_t bytes_out = 0;  // payload bytes sent (counted by the transport)
  int live_workers = 0;
  std::map<std::string, uint64_t> rejected;  // by reason
  uint64_t duplicates = 0;       // pushes of an applied (worker, incarnation, step): acknowledged
  uint64_t faults_injected = 0;  // calls answered UNAVAILABLE by the server's fault injector
  double mean_server_ms = 0;     // apply + finalize per step, mean
  std::string Prometheus() const;
};

class ParameterStore {
 public:
  explicit ParameterStore(StoreOptions options);
  ~ParameterStore();

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
  // is never held whole; other codecs are collected and decoded at Commit. Errors are
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
  struct KeyState {
    int64_t numel = 0;
    std::vector<float> weights;
    std::vector<float> accum;                // sum of the open step's pushes
    std::unique_ptr<std::mutex[]> block_mu;  // one per kBlock elements of accum
    SgdState sgd;
    std::unique_ptr<compressors::Compressor> pull;  // pull codec with its own error feedback
  };
  struct WorkerState {
    int rank = 0;
    uint64_t incarnation = 0;
    Clock::time_point last_seen;
    bool live = true;
    bool restored = false;    // known from a restored checkpoint, not registered since: its
                              // calls are refused ("register again"); steps wait for it
    int64_t async_step = -1;  // async: last push counter applied
  };
  // Where a streamed push lands: one vector per key of its bucket.
  using Buffer = std::vector<std::vector<float>>;
  // One bucket's step aggregation (parameter_store_lane.h): keys [begin, end), its open
  // step's pushes, staging buffers and the newest result.
  struct Lane;
  WorkerState& CheckWorker(const WorkerId& w);  // mu_ held
  void Reject(const std::string& reason);       // counts; mu_ not held
  // Validates every push (structure, decode, finite) and returns them in model order.
  std::vector<const compressors::Payload*> Validate(const std::vector<KeyPayload>& pushes);
  // Work items over all keys: a whole key for a compressed payload; kBlock-element ranges of
  // a "none" payload, which is read in place (no decode buffer) and split across threads.
  struct Item {
    size_t key;
    int64_t begin, end;
    bool raw;  // "none": floats read straight from the payload bytes
  };
  static constexpr int64_t kBlock = 1 << 20;
  std::vector<Item> Items(const std::vector<const compressors::Payload*>& ordered) const;
  void SetModel(const std::vector<TensorSpec>& model, const std::string& config_hash);  // mu_
  // Replaces the lanes by one per bucket (empty: one for the whole model); mu_ held, lanes idle.
  void SetLanes(const std::vector<int>& bucket_keys);
  Lane& LaneOf(int bucket, const WorkerId& w);  // mu_ held; InvalidArgument if out of range
  void MaybeFinalize(Lane& lane);               // mu_ held
  void MaybeFinalizeAll();                      // mu_ held
  bool LanesEven() const;                       // mu_ held: every lane at step_
  void MaybeCheckpoint();                       // mu_ held: every checkpoint_every steps
  Checkpoint SaveCheckpointLocked() const;
  std::string WriteCheckpointLocked();
  int64_t last_checkpoint_step_ = -1;
  void MaybeElect();  // mu_ held: completes the elections every live worker voted in
  // A fresh result of keys [begin, end) of the weights, or of the accumulator times `scale`
  // (the mean), lossless or with the pull codec; `spare` (may be null) recycles buffers.
  std::shared_ptr<StepResult> Encode(int64_t step, bool weights, bool lossless, size_t begin,
                                     size_t end, float scale,
                                     std::vector<std::string>* spare);  // mu_ held
  // Async: the current weights with the pull codec, encoded once per server step.
  std::shared_ptr<const StepResult> AsyncWeights();  // mu_ held
  // Where a streamed push lands (sync: the accumulator for the lane's first push of a step,
  // else a staging buffer; async: a staging buffer). Staging buffers are allocated once per
  // lane and reused, at most kMaxStaging, so memory does not grow with the number of workers;
  // a push that finds none free waits for one (until its deadline).
  static constexpr int kMaxStaging = 1;
  void AcquireTarget(PushSession::State& s, std::unique_lock<std::mutex>& lock);  // mu_ held
  void ReleaseTarget(PushSession::State& s);                                      // mu_ held
  // Sync: lands the push in the accumulator (swapped or added), counts it, may finalize.
  PushPullResult CommitSync(PushSession::State& s, bool wait);
  PushPullResult AsyncPush(const WorkerId& w, int64_t step, int64_t base_step,
                           const std::vector<float*>& grads, uint64_t bytes,
                           std::optional<double> lr);
  static int64_t FirstNonFinite(const float* x, int64_t n);  // index, or -1
  // (key, begin, end) element ranges of kBlock over keys [first, last): the unit of parallel
  // work on big keys.
  std::vector<std::tuple<size_t, int64_t, int64_t>> Blocks(size_t first, size_t last) const;
  static bool PlainNone(const compressors::Compressor& c);  // "none" without decorators
  const compressors::Compressor& Decoder(const std::string& codec);
  std::shared_ptr<const StepResult> FindResult(const Lane& lane, int64_t step) const;  // mu_
  // Every lane's result of `step` as one (Pull without a bucket); null if one is missing.
  std::shared_ptr<const StepResult> JoinedResult(int64_t step) const;  // mu_ held

  const StoreOptions opt_;
  ThreadPool pool_;
  mutable std::mutex mu_;
  std::condition_variable step_cv_;
  bool shutdown_ = false;
  std::vector<TensorSpec> model_;
  std::map<std::string, size_t> key_index_;
  std::vector<std::unique_ptr<KeyState>> keys_;
  std::string config_hash_;
  bool initialized_ = false;
  WorkerId initialized_by_;  // whose InitWeights won
  std::map<std::string, WorkerState> workers_;
  int next_rank_ = 0;
  Clock::time_point first_register_;          // until all expected workers registered (or the
                                              // worker timeout passed), steps do not complete
  int64_t step_ = 0;                          // steps every lane completed (sync: the open step)
  std::vector<std::unique_ptr<Lane>> lanes_;  // one per bucket, model order
  std::vector<int> bucket_keys_;              // the registered split (empty: none)
  bool layout_set_ = false;                   // a Register fixed the split (reset by a restore)
  std::map<std::string, int> in_call_;        // calls inside PushPull (incl. the barrier wait)
  std::shared_ptr<const StepResult> weights_result_;  // async cache, by step_
  struct Election {
    std::map<std::string, double> scores;  // by worker name
    int best_rank = -1;                    // set once every live worker voted
    double best_score = 0;
  };
  std::map<int64_t, Election> elections_;  // by round; the last few kept
  int64_t weights_version_ = 0;            // 0 at init, round + 1 after PublishWeights
  StoreStats stats_;
  double total_server_ms_ = 0;
  std::mutex decoders_mu_;
  std::map<std::string, std::unique_ptr<compressors::Compressor>> decoders_;
};

}  // namespace gradpress::server
