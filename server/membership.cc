#include "server/membership.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/byte_io.h"
#include "common/error.h"

namespace gradpress::server {

Member& Membership::Join(const WorkerId& w, int64_t step) {
  auto it = members_.find(w.name);
  if (it == members_.end()) {
    GP_REFUSE(FailedPrecondition, Reason::kTooManyWorkers,
              static_cast<int>(members_.size()) < expected_, "server expects ", expected_,
              " workers and all have registered; '", w.name, "' is one too many");
    if (members_.empty()) first_register_ = Clock::now();
    it = members_.emplace(w.name, Member{}).first;
    it->second.rank = next_rank_++;
  } else {
    GP_REFUSE(FailedPrecondition, Reason::kSuperseded, w.incarnation >= it->second.incarnation,
              "worker '", w.name, "' registered with incarnation ", w.incarnation,
              " older than the current ", it->second.incarnation);
    if (it->second.restored) {
      // The first member back after a restart starts the wait for the others.
      bool any_back = false;
      for (const auto& [name, m] : members_) any_back = any_back || !m.restored;
      if (!any_back) first_register_ = Clock::now();
      it->second.restored = false;
      spdlog::info("worker '{}' (rank {}) is back after the server's restart, at step {}", w.name,
                   it->second.rank, step);
    } else if (!it->second.live) {
      spdlog::info("worker '{}' rejoins at step {}", w.name, step);
    }
  }
  it->second.incarnation = w.incarnation;
  ++it->second.joins;
  it->second.live = true;
  it->second.last_seen = Clock::now();
  return it->second;
}

Member& Membership::Check(const WorkerId& w, int64_t step) {
  auto it = members_.find(w.name);
  GP_REFUSE(NotFound, Reason::kNotRegistered, it != members_.end(), "worker '", w.name,
            "' is not registered");
  Member& m = it->second;
  GP_REFUSE(FailedPrecondition, Reason::kSuperseded, w.incarnation >= m.incarnation, "worker '",
            w.name, "': incarnation ", w.incarnation, " is older than the registered ",
            m.incarnation, " (a restarted copy has taken over)");
  GP_REFUSE(FailedPrecondition, Reason::kRegisterAgain, !m.restored, "worker '", w.name,
            "': the server restarted from its checkpoint of step ", step,
            "; register again to rejoin");
  GP_REFUSE(FailedPrecondition, Reason::kNotRegistered, w.incarnation == m.incarnation, "worker '",
            w.name, "': incarnation ", w.incarnation,
            " has not registered (registered: ", m.incarnation, ")");
  GP_REFUSE(FailedPrecondition, Reason::kRegisterAgain, m.live, "worker '", w.name,
            "' was dropped from the barrier after ", timeout_s_,
            " s of silence; register again to rejoin");
  m.last_seen = Clock::now();
  return m;
}

const Member* Membership::Find(const std::string& name) const {
  auto it = members_.find(name);
  return it == members_.end() ? nullptr : &it->second;
}

Member* Membership::Find(const std::string& name) {
  auto it = members_.find(name);
  return it == members_.end() ? nullptr : &it->second;
}

int Membership::Live() const {
  int n = 0;
  for (const auto& [name, m] : members_) n += m.live;
  return n;
}

bool Membership::Starting(bool warn, int64_t step) const {
  int registered = 0;  // restored members count once they registered again
  for (const auto& [name, m] : members_) registered += !m.restored;
  if (registered >= expected_) return false;
  const auto waited = std::chrono::duration<double>(Clock::now() - first_register_).count();
  if (waited < timeout_s_) return true;  // the others may still be starting
  if (warn) {
    spdlog::warn("only {} of {} workers registered after {:.1f} s: step {} goes on without them",
                 registered, expected_, waited, step);
  }
  return false;
}

void Membership::Leave(const std::string& name) {
  auto it = in_call_.find(name);
  if (it != in_call_.end() && --it->second == 0) in_call_.erase(it);
  auto m = members_.find(name);
  if (m != members_.end()) m->second.last_seen = Clock::now();
}

std::vector<std::string> Membership::DropSilent(Clock::time_point now, int64_t step) {
  std::vector<std::string> dropped;
  const auto limit = std::chrono::duration<double>(timeout_s_);
  for (auto& [name, m] : members_) {
    if (m.live && now - m.last_seen > limit && !in_call_.count(name)) {
      m.live = false;
      spdlog::warn("worker '{}' silent for {:.1f} s: dropped from the barrier at step {}", name,
                   std::chrono::duration<double>(now - m.last_seen).count(), step);
      dropped.push_back(name);
    }
  }
  return dropped;
}

void Membership::Save(ByteWriter* w) const {
  w->PutVarint(members_.size());
  for (const auto& [name, m] : members_) {
    w->PutVarint(name.size());
    w->PutBytes(name.data(), name.size());
    w->Put<uint64_t>(m.incarnation);
    w->Put<int32_t>(m.rank);
  }
}

void Membership::Restore(ByteReader* r, const std::string& context) {
  std::map<std::string, Member> members;
  int next_rank = 0;
  const uint64_t n = r->GetVarint("member count");
  GP_ENFORCE(n <= r->remaining(), context, ": ", n, " members in ", r->remaining(), " bytes");
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t len = r->GetVarint("member name length");
    GP_ENFORCE(len <= r->remaining(), context, ": member name of ", len, " bytes");
    const std::string name(r->GetBytes(len, "member name"));
    Member m;
    m.incarnation = r->Get<uint64_t>("incarnation");
    m.rank = r->Get<int32_t>("rank");
    GP_ENFORCE(m.rank >= 0 && m.rank < 1 << 20, context, ": member '", name, "' has rank ", m.rank);
    m.live = false;
    m.restored = true;
    m.last_seen = Clock::now();
    next_rank = std::max(next_rank, m.rank + 1);
    GP_ENFORCE(members.emplace(name, m).second, context, ": member '", name, "' twice");
  }
  r->ExpectEnd();
  members_ = std::move(members);
  next_rank_ = next_rank;
  first_register_ = Clock::now();
}

}  // namespace gradpress::server
