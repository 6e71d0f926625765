#pragma once
// KeyHolds: who works on the model's keys (weights, optimizer state, pull codecs) outside the
// parameter store's lock, so that the lock guards bookkeeping only (server/store_state.h).
//   - a lane's finalize owns that lane's keys (Lane::finalizing);
//   - a reader reads every key: a checkpoint's copy, Weights();
//   - a writer changes every key: InitWeights, PublishWeights, the async step.
// Finalizes of different lanes run at once, and readers among themselves; everything else
// excludes each other. A reader or writer waiting for its turn keeps new finalizes from
// starting, so it is never starved by a stream of steps. The accumulator rows are not theirs:
// a lane's pushes land in them under the lane's own bookkeeping (server/aggregation.h).
//
//   std::unique_lock<std::mutex> lock(mu_);
//   KeyHold hold(&holds_, &lock, &cv_, KeyHolds::kRead);   // waits for finalizes to end
//   Unlocked(&lock, [&] { model_.Save(&checkpoint); });     // the work, mu_ released
//   // ~KeyHold, mu_ held again: released, waiters woken
// Thread-safety: KeyHolds and KeyHold with the store's mutex held (the one `lock` holds).
#include <condition_variable>
#include <mutex>

namespace gradpress::server {

class KeyHolds {
 public:
  enum Kind { kRead, kWrite };

  // A lane may start to finalize: no reader or writer holds or waits for the keys.
  bool CanFinalize() const { return !writer_ && readers_ == 0 && waiting_ == 0; }
  void BeginFinalize() { ++finalizing_; }
  void EndFinalize() { --finalizing_; }
  // No hold of any kind (a finalize, a reader or a writer).
  bool Idle() const { return !writer_ && readers_ == 0 && finalizing_ == 0; }

  // Waits on `cv` (releasing `lock`) until `kind` may start, then holds it.
  void Acquire(std::unique_lock<std::mutex>* lock, std::condition_variable* cv, Kind kind) {
    if (!Can(kind)) {
      ++waiting_;
      cv->wait(*lock, [&] { return Can(kind); });
      --waiting_;
    }
    if (kind == kRead) {
      ++readers_;
    } else {
      writer_ = true;
    }
  }
  void Release(Kind kind) {
    if (kind == kRead) {
      --readers_;
    } else {
      writer_ = false;
    }
  }

 private:
  bool Can(Kind kind) const {
    return !writer_ && finalizing_ == 0 && (kind == kRead || readers_ == 0);
  }
  int finalizing_ = 0;  // lanes finalizing
  int readers_ = 0;
  bool writer_ = false;
  int waiting_ = 0;  // readers and writers waiting for their turn
};

// A reader's or writer's hold, taken and released with the store's mutex held; the release
// wakes every waiter on `cv` (finalizes waiting for the keys among them).
class KeyHold {
 public:
  KeyHold(KeyHolds* holds, std::unique_lock<std::mutex>* lock, std::condition_variable* cv,
          KeyHolds::Kind kind)
      : holds_(holds), cv_(cv), kind_(kind) {
    holds_->Acquire(lock, cv, kind);
  }
  ~KeyHold() { Release(); }
  KeyHold(const KeyHold&) = delete;
  KeyHold& operator=(const KeyHold&) = delete;
  // Ends the hold before the scope does (mu_ held); once.
  void Release() {
    if (!holds_) return;
    holds_->Release(kind_);
    holds_ = nullptr;
    cv_->notify_all();
  }

 private:
  KeyHolds* holds_;
  std::condition_variable* cv_;
  KeyHolds::Kind kind_;
};

// Runs fn() with `lock` released; locked again before it returns or throws.
template <class Fn>
void Unlocked(std::unique_lock<std::mutex>* lock, Fn&& fn) {
  struct Relock {
    std::unique_lock<std::mutex>* lock;
    ~Relock() { lock->lock(); }
  };
  lock->unlock();
  Relock relock{lock};
  fn();
}

}  // namespace gradpress::server
