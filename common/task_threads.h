#pragma once
// Long-lived threads that start each task at once: on an idle thread, or on a new one when
// every thread is busy. For tasks that block on each other (a shard's call waiting at a
// barrier, a server handler waiting for the next push), where a fixed pool (ThreadPool) could
// leave a task queued behind the ones it waits for; and for work that recurs each step, where
// starting a thread per task costs more than the task. Threads stay for the next task and end
// when idle for `idle_exit`, or at Join.
//
//   TaskThreads threads;
//   threads.Run([&] { CallShard(1); });   // false: not run (max_busy, stopped, no thread)
//
// Join (and the destructor) refuses new tasks while it lets the running and queued ones finish
// and joins every thread; past its deadline the remaining threads are detached (they hold the
// shared state, so nothing they touch goes away). Afterwards new tasks start new threads.
// Thread-safety: Run, busy, started and alive may be called from any thread; Join once.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace gradpress {

class TaskThreads {
 public:
  using Clock = std::chrono::steady_clock;
  // `name`: the threads' name (common/thread_name.h).
  explicit TaskThreads(int max_busy = 1 << 30,
                       std::chrono::milliseconds idle_exit = std::chrono::seconds(30),
                       std::string name = "gp-task");
  ~TaskThreads();
  TaskThreads(const TaskThreads&) = delete;
  TaskThreads& operator=(const TaskThreads&) = delete;

  bool Run(std::function<void()> task);
  // Runs fn(0..n-1) at once, fn(0) on the caller and the others on the threads (on the caller
  // after fn(0) if none can start), and returns when all have ended, rethrowing the failure
  // of the lowest i that failed.
  void ForEach(size_t n, const std::function<void(size_t)>& fn);
  // True when every thread has ended by `deadline`.
  bool Join(Clock::time_point deadline = Clock::time_point::max());

  int busy() const;         // tasks queued or running
  int64_t started() const;  // threads started since construction
  int alive() const;        // threads not yet ended (detached ones too)

 private:
  struct State;
  std::shared_ptr<State> st_;
};

}  // namespace gradpress
