#include "common/thread_pool.h"

#include <atomic>
#include <exception>

namespace gradpress {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  // Shared state lives on this stack frame: helpers that start after the loop ended find
  // no work left and only touch `next`, `done` and `mu` before the final notify.
  struct State {
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    int running = 0;
    std::exception_ptr error;
  } st;
  auto drain = [&] {
    for (int64_t i; (i = st.next.fetch_add(1)) < n;) {
      try {
        fn(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(st.mu);
        if (!st.error) st.error = std::current_exception();
      }
    }
  };
  const int helpers = static_cast<int>(std::min<int64_t>(workers_.size(), n - 1));
  st.running = helpers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int h = 0; h < helpers; ++h) {
      queue_.emplace_back([&] {
        drain();
        std::lock_guard<std::mutex> lock(st.mu);
        if (--st.running == 0) st.cv.notify_all();
      });
    }
  }
  cv_.notify_all();
  drain();
  std::unique_lock<std::mutex> lock(st.mu);
  st.cv.wait(lock, [&] { return st.running == 0; });
  if (st.error) std::rethrow_exception(st.error);
}

}  // namespace gradpress
