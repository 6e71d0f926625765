#pragma once
// Membership: the parameter store's workers -- who registered (name, incarnation, rank), who
// is live, who is inside a call right now (alive, whatever its last message), and the
// registration grace during which steps wait for the workers still starting. Part of
// ParameterStore (server/parameter_store.h), which holds the one lock that guards it.
//
//   Membership m(/*expected=*/2, /*timeout_s=*/30);
//   Member& me = m.Join({"worker-0", 1}, step);   // Register: rank, rejoin, restored members
//   m.Check({"worker-0", 1}, step);               // every other call: refused unless current
//   for (auto& name : m.DropSilent(Clock::now())) ...   // CheckTimeouts
//
// Refusals: NotFound (never registered), FailedPrecondition (older incarnation, restored and
// not registered again, dropped after worker_timeout_s: "register again").
// Thread-safety: none of its own; the store calls it under its mutex.
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gradpress {
class ByteReader;
class ByteWriter;
}  // namespace gradpress

namespace gradpress::server {

using Clock = std::chrono::steady_clock;

struct WorkerId {
  std::string name;
  uint64_t incarnation = 0;
};

struct Member {
  int rank = 0;
  uint64_t incarnation = 0;
  Clock::time_point last_seen;
  bool live = true;
  bool restored = false;    // known from a restored checkpoint, not registered since: its
                            // calls are refused ("register again"); steps wait for it
  int64_t async_step = -1;  // async: last push counter applied
  int joins = 0;            // registrations by this process (more than 1: it rejoined)
};

class Membership {
 public:
  Membership(int expected, double timeout_s) : expected_(expected), timeout_s_(timeout_s) {}

  // Registers (or re-registers) w; `step` is the server step, for the log and messages.
  Member& Join(const WorkerId& w, int64_t step);
  // The current, live registration of w; marks it seen.
  Member& Check(const WorkerId& w, int64_t step);
  const Member* Find(const std::string& name) const;
  Member* Find(const std::string& name);
  const std::map<std::string, Member>& members() const { return members_; }
  bool empty() const { return members_.empty(); }
  int Live() const;
  // True while fewer than `expected` have registered and worker_timeout_s has not passed since
  // the first did: steps wait. Logs once per call site that asks with `warn` when it ends short.
  bool Starting(bool warn, int64_t step) const;
  // True if every live member is in `names`.
  template <class Set>
  bool AllLiveIn(const Set& names) const {
    for (const auto& [name, m] : members_)
      if (m.live && !names.count(name)) return false;
    return true;
  }
  // A call of `name` begins / ends (a worker inside a call is never dropped; its end counts
  // as a sign of life).
  void Enter(const std::string& name) { ++in_call_[name]; }
  void Leave(const std::string& name);
  // Marks live members silent for longer than worker_timeout_s as dropped (logged with the
  // server `step`); returns them.
  std::vector<std::string> DropSilent(Clock::time_point now, int64_t step);

  // Checkpoint section "members": name, incarnation, rank per member.
  void Save(ByteWriter* w) const;
  // Replaces the members by those of a checkpoint, each restored (must register again).
  void Restore(ByteReader* r, const std::string& context);

 private:
  int expected_;
  double timeout_s_;
  std::map<std::string, Member> members_;
  std::map<std::string, int> in_call_;
  int next_rank_ = 0;
  Clock::time_point first_register_;  // until all expected registered (or the timeout passed)
};

}  // namespace gradpress::server
