#pragma once
// Aggregation: the per-bucket step aggregation of the parameter store. The model's keys are
// split into lanes, one per bucket of the registered split (one for the whole model without
// one). A lane owns keys [begin, end) during a step: which workers pushed them, where pushes
// land (the accumulator rows of those keys, or the lane's staging buffer for a dense push; a
// sparse one is added from its indices and values), and the newest result. A lane completes
// its step on its own, as soon as every live worker has pushed it (per-bucket completion):
// the mean, the server's SGD step (exchange=weights) or the shadow weights' step, and the
// pull codec's encoding of the result. Owned by ParameterStore (server/store_state.h), whose
// lock guards the lanes' bookkeeping; the pushes that fill a lane are in
// parameter_store_push.cc and parameter_store_landing.cc.
//
//   Aggregation agg;  agg.Split(bucket_keys, model.size(), step);
//   Lane& lane = agg.Of(bucket, w);
//   if (agg.Ready(lane, members)) auto r = agg.Finalize(lane, &model, options, &pool);
// The store finalizes in three phases, the work without its lock:
//   Aggregation::Closing c = Aggregation::Close(lane);           // lock held
//   auto r = Aggregation::Compute(lane, &c, &model, opt, &pool);  // lock not held
//   Aggregation::Publish(lane, c, r);                             // lock held
// While lane.finalizing, the lane's keys (accumulator, weights, optimizer, pull codec) are
// Compute's alone: the store lands no push in the lane and takes no hold on the whole model.
// Thread-safety: none of its own.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "server/membership.h"
#include "server/model_state.h"
#include "server/store_types.h"

namespace gradpress::server {

// Where a streamed push lands: one vector per key of its lane.
using Buffer = std::vector<std::vector<float>>;

struct Lane {
  int index = 0;                             // the bucket
  size_t begin = 0, end = 0;                 // keys, model order
  int64_t step = 0;                          // steps this lane completed (sync: its open step)
  std::set<std::string> pushed;              // contributed to the open step
  std::set<std::string> in_flight;           // validating / accumulating right now
  std::map<std::string, int64_t> last_step;  // per worker: the last step it contributed
  int contributors = 0;
  double apply_ms = 0;         // the open step's pushes: validate + land
  std::optional<double> lr;    // lr the open step's pushes asked for
  std::vector<double> key_lr;  // per key of the lane, replacing lr (the last push's; empty: none)
  std::deque<std::shared_ptr<const StepResult>> results;  // newest last
  bool finalizing = false;   // Close..Publish: the lane's keys are Compute's (no lock held)
  bool accum_owned = false;  // a push is streaming straight into the accumulator rows
  int accum_holders = 0;     // pushes in the accumulator (committed, being added or owning it)
  std::vector<std::unique_ptr<Buffer>> staging_free;
  int staging_count = 0;  // staging buffers allocated (dense pushes only)
  // Held (not the store's lock) while a push is added into accumulator rows that already
  // hold others, so adds land one at a time and a row's SignedZeros stays exact.
  std::mutex add_mu;

  size_t keys() const { return end - begin; }
  int64_t LastStep(const std::string& worker) const;
  bool Idle() const {
    return pushed.empty() && in_flight.empty() && accum_holders == 0 && !accum_owned && !finalizing;
  }
  // The kept result of `step`, or null.
  std::shared_ptr<const StepResult> Find(int64_t step) const;
};

class Aggregation {
 public:
  // Replaces the lanes by one per bucket of `bucket_keys` (keys per bucket, model order;
  // empty: one lane of all `keys`), each at `step`; what workers contributed is kept, so
  // duplicates are recognised across a re-split. Lanes must be idle.
  void Split(const std::vector<int>& bucket_keys, size_t keys, int64_t step);
  void Clear() { lanes_.clear(); }
  size_t size() const { return lanes_.size(); }
  const std::vector<std::unique_ptr<Lane>>& lanes() const { return lanes_; }
  const std::vector<int>& split() const { return split_; }
  bool layout_set = false;  // a Register fixed the split (reset by a restore)
  // The lane of `bucket` (-1: the only lane); InvalidArgument naming w if out of range.
  Lane& Of(int bucket, const WorkerId& w);
  bool Idle() const;
  bool Even() const;  // every lane at the same step
  void SetStep(int64_t step);
  // Every lane's result of `step` as one; null if one is missing.
  std::shared_ptr<const StepResult> Joined(int64_t step) const;
  // The lane has pushes and every live member has pushed it (a push streaming into the
  // accumulator must land first).
  static bool Ready(const Lane& lane, const Membership& members);
  // Completes the lane's open step: the result (contributors and server_ms set), kept as the
  // lane's newest; advances lane.step and resets the open step. Close + Compute + Publish.
  static std::shared_ptr<const StepResult> Finalize(Lane& lane, ModelState* model,
                                                    const StoreOptions& opt, ThreadPool* pool);
  // The open step's figures, taken when a finalize begins.
  struct Closing {
    int64_t step = 0;
    int contributors = 0;
    double apply_ms = 0;             // the pushes' validate + land, summed
    std::optional<double> lr;        // the learning rate the pushes asked for
    std::vector<double> key_lr;      // per key of the lane, replacing lr (empty: lr for all)
    std::vector<std::string> spare;  // the previous result's buffers, for Encode
    // The previous result while a pull still holds it: let go by Compute, without the lock.
    std::shared_ptr<const StepResult> previous;
    double compute_ms = 0;  // set by Compute
  };
  // Begins the finalize of a Ready lane: lane.finalizing; the previous result leaves the
  // lane, its buffers taken for reuse unless someone still holds it.
  static Closing Close(Lane& lane);
  // The mean, SGD or shadow step and the pull encoding of the lane's keys; touches nothing
  // of the lane but its key range, so it runs without the store's lock.
  static std::shared_ptr<StepResult> Compute(const Lane& lane, Closing* c, ModelState* model,
                                             const StoreOptions& opt, ThreadPool* pool);
  // Keeps the result as the lane's newest, advances lane.step, opens the next step.
  static void Publish(Lane& lane, const Closing& c, const std::shared_ptr<StepResult>& result);

 private:
  std::vector<std::unique_ptr<Lane>> lanes_;  // model order
  std::vector<int> split_;                    // the registered split (empty: none)
};

}  // namespace gradpress::server
