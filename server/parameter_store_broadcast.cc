// ParameterStore: a root worker's named bytes for the others (server/broadcasts.h), the
// Broadcast RPC's store side.
#include "common/error.h"
#include "server/parameter_store.h"

namespace gradpress::server {

void ParameterStore::BroadcastPut(const WorkerId& w, const std::string& name, int64_t round,
                                  uint64_t total_bytes, uint64_t offset, std::string_view piece) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckWorker(w);
  if (broadcasts_.Put(w.name, name, round, total_bytes, offset, piece)) step_cv_.notify_all();
}

std::shared_ptr<const std::string> ParameterStore::BroadcastGet(const WorkerId& w,
                                                                const std::string& name,
                                                                int64_t round,
                                                                Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  std::shared_ptr<const std::string> v;
  step_cv_.wait_until(lock, deadline, [&] {
    v = broadcasts_.Find(w.name, name, round);  // throws for a replaced round
    return shutdown_ || v != nullptr;
  });
  GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
  GP_REFUSE(Unavailable, Reason::kTimedOut, v != nullptr, "worker '", w.name, "': no broadcast '",
            name, "' round ", round,
            " from its root before the deadline (did the root rank call it?)");
  return v;
}

}  // namespace gradpress::server
