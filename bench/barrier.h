#pragma once
// Barrier: a reusable rendezvous for a fixed number of threads, which also reports when it
// released them. The transport bench's workers use it to start each push / pull phase
// together and to time the phase from the release.
//
//   Barrier barrier(workers);
//   auto go = barrier.Wait();   // in each worker; returns once all `workers` have arrived
//   barrier.Break();            // from a failing worker: every Wait, now or later, throws
//
// Wait returns the same time point to every thread of one generation: Clock::now() taken
// by the last thread to arrive. After Break, Wait throws std::runtime_error.
// Thread-safety: Wait and Break from any thread; exactly n threads per generation.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>

namespace gradpress::bench {

class Barrier {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Barrier(int n) : n_(n) {}
  Clock::time_point Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t generation = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      release_ = Clock::now();
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation || broken_; });
    }
    if (broken_) throw std::runtime_error("stopped: another worker failed");
    return release_;
  }
  void Break() {
    std::lock_guard<std::mutex> lock(mu_);
    broken_ = true;
    cv_.notify_all();
  }

 private:
  const int n_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool broken_ = false;
  Clock::time_point release_;
};

}  // namespace gradpress::bench
