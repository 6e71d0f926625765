#include "server/elections.h"

#include <spdlog/spdlog.h>

namespace gradpress::server {

void Elections::Vote(int64_t round, const std::string& worker, double score) {
  rounds_[round].scores[worker] = score;
  while (rounds_.size() > kKept) rounds_.erase(rounds_.begin());
}

bool Elections::Complete(const Membership& members) {
  bool decided = false;
  for (auto& [round, e] : rounds_) {
    if (e.best_rank >= 0 || e.scores.empty() || !members.AllLiveIn(e.scores)) continue;
    for (const auto& [name, score] : e.scores) {
      const Member* m = members.Find(name);
      if (m == nullptr) continue;
      if (e.best_rank < 0 || score > e.best_score ||
          (score == e.best_score && m->rank < e.best_rank)) {
        e.best_rank = m->rank;
        e.best_score = score;
      }
    }
    spdlog::info("election {}: worker rank {} is best with {:.4f} ({} votes)", round, e.best_rank,
                 e.best_score, e.scores.size());
    decided = true;
  }
  return decided;
}

const Elections::Round* Elections::Find(int64_t round) const {
  auto it = rounds_.find(round);
  return it == rounds_.end() ? nullptr : &it->second;
}

}  // namespace gradpress::server
