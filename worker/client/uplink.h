#pragma once
// Uplink: a turn on the worker's uplink, so that concurrent buckets write their pushes one at
// a time (the bucket scheduler's priority, bucket_scheduler.h). A carrier takes the turn of a
// StepCall before encoding and writing its push, and gives it back once the push is written
// (also when the call fails); UplinkTurn holds it for a scope.
//
//   UplinkTurn turn(call.uplink);  turn.Take();  ... write ...;  turn.Give();
//
// Thread-safety: an Uplink is shared by the calls of one step; an UplinkTurn is one call's.

namespace gradpress::worker {

class Uplink {
 public:
  virtual ~Uplink() = default;
  virtual void Acquire() = 0;
  virtual void Release() = 0;
};

// A call's turn on an Uplink (null: none), held from Take until Give or destruction; Take
// again after Give (a retry) takes a new turn.
class UplinkTurn {
 public:
  explicit UplinkTurn(Uplink* uplink) : uplink_(uplink) {}
  ~UplinkTurn() { Give(); }
  UplinkTurn(const UplinkTurn&) = delete;
  UplinkTurn& operator=(const UplinkTurn&) = delete;
  void Take() {
    if (uplink_ && !held_) uplink_->Acquire();
    held_ = uplink_ != nullptr;
  }
  void Give() {
    if (held_) uplink_->Release();
    held_ = false;
  }

 private:
  Uplink* uplink_;
  bool held_ = false;
};

}  // namespace gradpress::worker
