#pragma once
// Monotonic stopwatch (std::chrono::steady_clock), for phase timings in metrics and benches.
//
//   Timer t;  ...;  double ms = t.ElapsedMs();  t.Restart();
//
// Thread-safety: a Timer is a value; do not share one between threads.
#include <chrono>

namespace gradpress {

class Timer {
 public:
  Timer() : start_(Clock::now()) {}
  void Restart() { start_ = Clock::now(); }
  double ElapsedSeconds() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }
  double ElapsedMs() const { return ElapsedSeconds() * 1e3; }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

}  // namespace gradpress
