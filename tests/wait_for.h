#pragma once
// Waiting in tests: on a condition, with a deadline, never a bare sleep. A test orders its
// events by what it observes (a server counter, a step number, a worker's arrival), so a slow
// or busy machine makes it slower, not wrong.
//
//   REQUIRE(WaitFor([&] { return store.Stats().bytes_in > 0; }));   // polled, 60 s at most
//   Event pushed;  ...;  pushed.Set();   // another thread
//   REQUIRE(pushed.Wait());              // woken at once, 60 s at most
//
// Catch2's assertions are not thread-safe: threads record what they saw (or Set an Event) and
// the test's main thread asserts.
// Thread-safety: WaitFor calls `done` on the calling thread only; Event is thread-safe.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace gradpress::testing {

// Generous: reached only when something is broken (then the test fails instead of hanging).
inline constexpr std::chrono::seconds kWaitTimeout{60};

// Calls done() until it returns true or `timeout` has passed; returns its last answer. For
// conditions nobody signals (counters of a store, a server's step): it polls, every 2 ms.
template <class Pred>
bool WaitFor(Pred&& done, std::chrono::duration<double> timeout = kWaitTimeout) {
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  while (!done()) {
    if (std::chrono::steady_clock::now() >= deadline) return done();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

// A one-shot signal between threads: Set once, Wait until set (or the timeout).
class Event {
 public:
  void Set() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      set_ = true;
    }
    cv_.notify_all();
  }
  bool IsSet() const {
    std::lock_guard<std::mutex> lock(mu_);
    return set_;
  }
  bool Wait(std::chrono::duration<double> timeout = kWaitTimeout) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return set_; });
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool set_ = false;
};

}  // namespace gradpress::testing
