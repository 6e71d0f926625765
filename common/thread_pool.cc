#include "common/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <memory>

#include "common/thread_name.h"

namespace gradpress {

ThreadPool::ThreadPool(int threads, const std::string& name) {
  for (int i = 1; i < threads; ++i) {
    workers_.emplace_back([this, name] {
      NameThisThread(name);
      WorkerLoop();
    });
  }
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
  // The caller waits for the items, not for the helpers: a helper woken after the items ran
  // out finds none and leaves (the state is shared, so it may outlive this call), and the
  // caller never waits for a thread the scheduler has not run yet. Only a helper that took an
  // item touches fn, and the caller waits for that item's end.
  struct State {
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    int64_t done = 0;
    std::exception_ptr error;
  };
  auto st = std::make_shared<State>();
  const std::function<void(int64_t)>* f = &fn;
  auto drain = [st, n, f] {
    int64_t ran = 0;
    std::exception_ptr error;
    for (int64_t i; (i = st->next.fetch_add(1)) < n; ++ran) {
      try {
        (*f)(i);
      } catch (...) {
        if (!error) error = std::current_exception();
      }
    }
    if (ran == 0) return;
    std::lock_guard<std::mutex> lock(st->mu);
    if (error && !st->error) st->error = error;
    if ((st->done += ran) == n) st->cv.notify_all();
  };
  const int helpers = static_cast<int>(std::min<int64_t>(workers_.size(), n - 1));
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (int h = 0; h < helpers; ++h) queue_.emplace_back(drain);
  }
  for (int h = 0; h < helpers; ++h) cv_.notify_one();
  drain();
  std::unique_lock<std::mutex> lock(st->mu);
  st->cv.wait(lock, [&] { return st->done == n; });
  if (st->error) std::rethrow_exception(st->error);
}

}  // namespace gradpress
