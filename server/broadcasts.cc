#include "server/broadcasts.h"

#include "common/error.h"

namespace gradpress::server {

bool Broadcasts::Put(const std::string& who, const std::string& name, int64_t round, uint64_t total,
                     uint64_t offset, std::string_view piece) {
  GP_REFUSE(InvalidArgument, Reason::kBadRequest, !name.empty() && name.size() <= kMaxNameBytes,
            "worker '", who, "': a broadcast's name must be 1 to ", kMaxNameBytes, " bytes, got ",
            name.size());
  GP_REFUSE(InvalidArgument, Reason::kBadRequest, round >= 0, "worker '", who, "': broadcast '",
            name, "' round ", round, " is negative");
  GP_REFUSE(InvalidArgument, Reason::kBadRequest, total <= max_bytes_, "worker '", who,
            "': broadcast '", name, "' of ", total, " bytes exceeds the server's limit of ",
            max_bytes_, " bytes (server.max_broadcast_mb ", max_bytes_ >> 20, ")");
  auto it = values_.find(name);
  if (it == values_.end()) {
    GP_REFUSE(InvalidArgument, Reason::kBadRequest, values_.size() < kMaxNames, "worker '", who,
              "': broadcast '", name, "' would be the server's name number ", kMaxNames + 1,
              "; it keeps at most ", kMaxNames);
    it = values_.emplace(name, Value{}).first;
    it->second.round = -1;
  }
  Value& v = it->second;
  GP_REFUSE(FailedPrecondition, Reason::kResultDropped, round >= v.round, "worker '", who,
            "': broadcast '", name, "' round ", round, " is older than the newest kept, round ",
            v.round);
  if (round == v.round && v.whole) return false;  // a retry of a whole round
  if (round > v.round || offset == 0) {
    GP_REFUSE(InvalidArgument, Reason::kBadRequest, offset == 0, "worker '", who, "': broadcast '",
              name, "' round ", round, " must start at offset 0, got ", offset);
    v.round = round;
    v.total = total;
    v.data = std::make_shared<std::string>();
    v.data->reserve(total);
    v.whole = false;
  }
  GP_REFUSE(InvalidArgument, Reason::kBadRequest, total == v.total, "worker '", who,
            "': broadcast '", name, "' round ", round, " was ", v.total, " bytes, now ", total);
  const uint64_t have = v.data->size();
  if (offset < have && offset + piece.size() <= have) return false;  // a retried piece
  GP_REFUSE(InvalidArgument, Reason::kBadRequest, offset == have, "worker '", who, "': broadcast '",
            name, "' round ", round, ": a piece at offset ", offset, ", expected ", have);
  GP_REFUSE(InvalidArgument, Reason::kBadRequest, piece.size() <= total - have, "worker '", who,
            "': broadcast '", name, "' round ", round, ": a piece of ", piece.size(),
            " bytes at offset ", offset, " ends past its ", total, " bytes");
  v.data->append(piece.data(), piece.size());
  v.whole = v.data->size() == total;
  return v.whole;
}

std::shared_ptr<const std::string> Broadcasts::Find(const std::string& who, const std::string& name,
                                                    int64_t round) const {
  auto it = values_.find(name);
  if (it == values_.end()) return nullptr;
  const Value& v = it->second;
  GP_REFUSE(FailedPrecondition, Reason::kResultDropped, v.round <= round, "worker '", who,
            "': broadcast '", name, "' round ", round, " was replaced by the root's round ",
            v.round, ": every worker must make the same broadcasts of a name, in the same order");
  if (v.round < round || !v.whole) return nullptr;
  return v.data;
}

}  // namespace gradpress::server
