#pragma once
// Broadcasts: named values one worker (the root) sends to the others -- gradpress.torch's
// broadcast_optimizer_state and broadcast_object over the Broadcast RPC. The root puts its
// value under a name and a round (0, 1, ... per name: the n-th broadcast of that name), in
// pieces in order; the others wait for that round's value to be whole and read it. Only the
// newest round of a name is kept (not checkpointed: a broadcast is part of a job's start).
// Bounded: a value of at most max_bytes (server.max_broadcast_mb), at most kMaxNames names of
// at most kMaxNameBytes. Part of ParameterStore (server/parameter_store.h), whose lock guards
// it; a piece is copied under that lock (the root's pieces are at most 2 MiB).
//
//   Broadcasts b(64 << 20);
//   if (b.Put("worker-0", "optimizer_state", 0, total, offset, piece)) cv.notify_all();
//   std::shared_ptr<const std::string> v = b.Find("worker-1", "optimizer_state", 0);  // or null
// Thread-safety: none of its own.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>

namespace gradpress::server {

class Broadcasts {
 public:
  static constexpr size_t kMaxNames = 256;
  static constexpr size_t kMaxNameBytes = 200;
  explicit Broadcasts(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // The root's piece [offset, offset + piece.size()) of name's value of `round`, `total` bytes
  // in all. Offset 0 starts the round (again, for an unfinished one); a piece already received
  // (a retry) or one of a round already whole is acknowledged and changes nothing. Returns true
  // when the value became whole with this piece. InvalidArgument (bad_request): an empty or
  // too long name, a negative round, a value over max_bytes, too many names, a piece out of
  // order or past `total`, another total than the round's first piece said.
  // FailedPrecondition (result_dropped): a round older than the name's newest.
  bool Put(const std::string& who, const std::string& name, int64_t round, uint64_t total,
           uint64_t offset, std::string_view piece);
  // Name's whole value of `round`; null while it is not there yet (nothing put, an older round,
  // or still arriving). FailedPrecondition (result_dropped) when the name holds a newer round:
  // the workers did not call their broadcasts of that name alike.
  std::shared_ptr<const std::string> Find(const std::string& who, const std::string& name,
                                          int64_t round) const;
  uint64_t max_bytes() const { return max_bytes_; }

 private:
  struct Value {
    int64_t round = 0;
    uint64_t total = 0;
    std::shared_ptr<std::string> data;  // the pieces so far; never changed once whole
    bool whole = false;
  };
  uint64_t max_bytes_;
  std::map<std::string, Value> values_;
};

}  // namespace gradpress::server
