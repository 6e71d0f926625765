#pragma once
// StoreState: what ParameterStore (server/parameter_store.h) keeps behind its one lock `mu_`,
// and the bookkeeping its .cc files share. ParameterStore inherits it privately: nothing
// here is part of the store's API.
//
// mu_ guards bookkeeping only: membership, each lane's counters and results, the step,
// elections, counters, checkpoint scheduling -- work of microseconds. The heavy work on the
// model's keys runs with mu_ released, owned through server/key_holds.h:
//   - a lane's finalize (mean, server SGD or shadow step, pull encode) owns the lane's keys
//     from Aggregation::Close to Publish (MaybeFinalize); a push into that lane waits for it;
//   - the async step (AsyncPush) holds every key as the writer: SGD, then the pull encode;
//   - InitWeights / PublishWeights decode into the weights as the writer;
//   - a checkpoint copies the keys as a reader (no finalize meanwhile: all lanes stay at the
//     checkpoint's step), then writes and fsyncs the file holding nothing but its turn;
//   - Weights() copies them as a reader;
//   - pushes land in a lane's accumulator rows as before: the first writes them directly, a
//     later one adds under the lane's add_mu; their decode runs on the pool, unlocked.
// So Heartbeat, Register, Stats and the dashboard wait for bookkeeping only. step_cv_ wakes
// every waiter: a step's result, a staging buffer, the accumulator, a hold's release, a
// lane's finalize ending, a checkpoint file's turn.
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "common/checkpoint.h"
#include "common/thread_pool.h"
#include "server/aggregation.h"
#include "server/broadcasts.h"
#include "server/elections.h"
#include "server/key_holds.h"
#include "server/membership.h"
#include "server/model_state.h"
#include "server/store_types.h"

namespace gradpress::server {

struct PushState;  // one streamed push (server/push_session.h)

struct StoreState {
  explicit StoreState(StoreOptions options);

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

  // Finalizes the lane if every live worker pushed it: Close under mu_, Compute without it
  // (waiting first for a reader's or writer's hold to end), Publish under mu_; advances
  // step_ and may checkpoint once every lane completed the step. mu_ held by `lock` on entry
  // and exit, released in between.
  void MaybeFinalize(Lane& lane, std::unique_lock<std::mutex>* lock);
  void MaybeFinalizeAll(std::unique_lock<std::mutex>* lock);
  // Async: the current weights with the pull codec (encoded as the writer if not yet).
  std::shared_ptr<const StepResult> AsyncResult(std::unique_lock<std::mutex>* lock);

  // Checkpoints (parameter_store_checkpoint.cc). MaybeCheckpoint: every checkpoint_every
  // steps, errors logged. WriteCheckpointLocked: the current step unless written, or some
  // lanes are ahead ("" then); the keys copied as a reader, the file written holding nothing.
  void MaybeCheckpoint(std::unique_lock<std::mutex>* lock);
  std::string WriteCheckpointLocked(std::unique_lock<std::mutex>* lock);
  // Meta and members of a checkpoint of `step` (mu_ held); the keys' sections are
  // ModelState::Save's, filled by the caller while it holds the keys.
  Checkpoint CheckpointMeta(int64_t step) const;
  // One checkpoint file at a time, in step order: AwaitCheckpointTurn (still holding the
  // keys that were copied, so a later checkpoint cannot overtake), then WriteCheckpointFile
  // writes c and frees it with mu_ released, and gives the turn on. Returns the path ("" if
  // c's step was written already).
  void AwaitCheckpointTurn(std::unique_lock<std::mutex>* lock);
  std::string WriteCheckpointFile(std::unique_lock<std::mutex>* lock, Checkpoint c);

  // Where a streamed push lands (parameter_store_landing.cc). Sync: the accumulator itself for
  // the lane's first push of a step (TryOwn); a later push's sparse keys are added into it
  // from their indices and values, its dense keys through a staging buffer taken when the
  // first of them arrives (EnsureTarget). Async: a staging buffer. Staging buffers are
  // allocated once per lane and reused, at most kMaxStaging, so memory does not grow with the
  // number of workers; a push that finds none free waits for one (until its deadline).
  static constexpr int kMaxStaging = 1;
  bool TryOwn(PushState& s);                                             // mu_ held
  void AcquireTarget(PushState& s, std::unique_lock<std::mutex>& lock);  // mu_ held
  void EnsureTarget(PushState& s);                                       // takes mu_
  void ReleaseTarget(PushState& s);                                      // mu_ held
  // Adds a later push into the accumulator under the lane's add_mu; mu_ not held.
  void AddToAccumulator(PushState& s);
  // Sync: lands the push in the accumulator (swapped or added), counts it, may finalize.
  PushPullResult CommitSync(PushState& s, bool wait);
  // Async: applies the push to the weights as the writer (mu_ released for SGD and encode).
  PushPullResult AsyncPush(PushState& s);

  const StoreOptions opt_;
  ThreadPool pool_;
  mutable std::mutex mu_;
  mutable std::condition_variable step_cv_;
  mutable KeyHolds holds_;  // the model's keys, worked on outside mu_
  bool shutdown_ = false;
  Membership members_;
  ModelState model_;
  Aggregation agg_;
  Elections elections_;
  Broadcasts broadcasts_{opt_.max_broadcast_bytes};
  int weights_waiting_ = 0;      // Weights() calls waiting for the initial weights
  int64_t step_ = 0;             // steps every lane completed (sync: the open step)
  uint64_t placement_hash_ = 0;  // the first registration's (sharded servers)
  bool placement_set_ = false;
  int64_t last_checkpoint_step_ = -1;  // the newest checkpoint file written
  bool checkpoint_writing_ = false;    // a checkpoint has the turn to write its file
  int64_t started_at_ = 0;             // the step this process started or was restored at
  std::map<std::string, int64_t> catch_up_asks_;  // CatchUp: each worker's step
  Clock::time_point catch_up_first_;
  bool catch_up_done_ = false;
  StoreStats stats_;
  double total_server_ms_ = 0;
};

}  // namespace gradpress::server
