#pragma once
// A fixed pool of worker threads with a blocking ParallelFor, for per-key work on the
// server (decode, aggregate, encode keys in parallel).
//
//   ThreadPool pool(4);
//   pool.ParallelFor(keys.size(), [&](int64_t i) { Process(keys[i]); });
//
// ParallelFor runs fn(0..n-1) on the pool plus the calling thread and returns when all
// are done; the first exception thrown by fn is rethrown in the caller (the remaining
// items still run). threads <= 1 runs everything on the caller.
// Thread-safety: ParallelFor may be called from several threads at once.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace gradpress {

class ThreadPool {
 public:
  // `name`: the helper threads' name (common/thread_name.h).
  explicit ThreadPool(int threads, const std::string& name = "gp-pool");
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  void ParallelFor(int64_t n, const std::function<void(int64_t)>& fn);
  int size() const { return static_cast<int>(workers_.size()) + 1; }

 private:
  void WorkerLoop();
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace gradpress
