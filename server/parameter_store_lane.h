#pragma once
// ParameterStore::Lane: one bucket's step aggregation (private to the store's .cc files).
// A lane owns the keys [begin, end) of the model during a step: which workers pushed them,
// where the pushes land (the accumulator rows of those keys, or the lane's staging buffer),
// and the newest result. Every field is guarded by the store's mu_.
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "server/parameter_store.h"

namespace gradpress::server {

struct ParameterStore::Lane {
  int index = 0;                             // the bucket
  size_t begin = 0, end = 0;                 // keys, model order
  int64_t step = 0;                          // steps this lane completed (sync: its open step)
  std::set<std::string> pushed;              // contributed to the open step
  std::set<std::string> in_flight;           // validating / accumulating right now
  std::map<std::string, int64_t> last_step;  // per worker: the last step it contributed
  int contributors = 0;
  double apply_ms = 0;                                    // the open step's pushes: validate + land
  std::optional<double> lr;                               // lr the open step's pushes asked for
  std::deque<std::shared_ptr<const StepResult>> results;  // newest last
  std::vector<std::string> spare_bytes;  // a dropped result's buffers, for the next Encode
  bool accum_owned = false;              // a push is streaming straight into the accumulator rows
  int accum_holders = 0;  // pushes in the accumulator (committed, being added or owning it)
  std::vector<std::unique_ptr<Buffer>> staging_free;
  int staging_count = 0;  // staging buffers allocated

  size_t keys() const { return end - begin; }
  int64_t LastStep(const std::string& worker) const {
    auto it = last_step.find(worker);
    return it == last_step.end() ? -1 : it->second;
  }
  bool Idle() const {
    return pushed.empty() && in_flight.empty() && accum_holders == 0 && !accum_owned;
  }
};

}  // namespace gradpress::server
