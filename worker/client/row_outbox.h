#pragma once
// RowOutbox: the dashboard's rows of a worker's metrics.jsonl waiting to be carried to the
// server by its next push or heartbeat (PushHeader.rows, HeartbeatRequest.rows). At most
// kMaxRows wait; older ones are dropped.
//
//   auto rows = std::make_shared<RowOutbox>();  options.rows = rows;   // the gRPC carrier's
//   rows->Put(StepRow(rank, m));                                        // the Trainer's
//
// Thread-safety: every method may be called concurrently.
#include <deque>
#include <mutex>
#include <vector>

#include "proto/gradpress.pb.h"

namespace gradpress::worker {

class RowOutbox {
 public:
  static constexpr size_t kMaxRows = 64;
  void Put(const proto::WorkerRow& row) {
    std::lock_guard<std::mutex> lock(mu_);
    if (rows_.size() == kMaxRows) rows_.pop_front();
    rows_.push_back(row);
  }
  // What waits, in order; none wait after.
  std::vector<proto::WorkerRow> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<proto::WorkerRow> out(rows_.begin(), rows_.end());
    rows_.clear();
    return out;
  }

 private:
  std::mutex mu_;
  std::deque<proto::WorkerRow> rows_;
};

}  // namespace gradpress::worker
