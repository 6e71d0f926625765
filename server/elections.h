#pragma once
// Elections: method 6's per-epoch vote for the best worker. Each live worker votes in a round
// with a score (its test accuracy); once every live member has voted, the best rank is fixed
// (highest score, ties to the lowest rank). The last few rounds are kept. Part of
// ParameterStore (server/parameter_store.h), which holds the lock that guards it.
//
//   elections.Vote(round, "worker-0", 0.83);
//   if (elections.Complete(membership)) cv.notify_all();   // after any vote or drop
//   const Elections::Round* r = elections.Find(round);     // r->best_rank >= 0 once decided
// Thread-safety: none of its own.
#include <cstdint>
#include <map>
#include <string>

#include "server/membership.h"

namespace gradpress::server {

class Elections {
 public:
  struct Round {
    std::map<std::string, double> scores;  // by worker name
    int best_rank = -1;                    // set once every live worker voted
    double best_score = 0;
  };
  // Records a vote (a repeat replaces the worker's score while the round is open).
  void Vote(int64_t round, const std::string& worker, double score);
  // Decides every round every live member has voted in; true if one was decided now.
  bool Complete(const Membership& members);
  const Round* Find(int64_t round) const;

 private:
  static constexpr size_t kKept = 4;
  std::map<int64_t, Round> rounds_;
};

}  // namespace gradpress::server
