#include "common/task_threads.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "common/thread_name.h"

namespace gradpress {

struct TaskThreads::State {
  State(int max_busy, std::chrono::milliseconds idle_exit, std::string name)
      : max_busy(max_busy), idle_exit(idle_exit), name(std::move(name)) {}
  const int max_busy;
  const std::chrono::milliseconds idle_exit;
  const std::string name;
  mutable std::mutex mu;
  std::condition_variable work, ended;
  std::deque<std::function<void()>> tasks;
  size_t available = 0;  // threads waiting for a task, or started and about to
  int busy = 0;
  int alive = 0;  // detached ones included
  int owned = 0;  // alive and in `threads`: what Join waits for
  int64_t started = 0;
  bool stop = false;
  std::map<std::thread::id, std::thread> threads;
  std::vector<std::thread::id> exited;  // ended on their own, not yet joined

  // Joins the threads that ended on their own (they hold no lock and touch nothing after
  // listing themselves), so an idle exit leaves no thread object behind.
  void ReapLocked() {
    for (const auto& id : exited) {
      auto it = threads.find(id);
      if (it == threads.end()) continue;
      if (it->second.joinable()) it->second.join();
      threads.erase(it);
    }
    exited.clear();
  }

  static void Loop(const std::shared_ptr<State>& self) {
    State& s = *self;
    NameThisThread(s.name);
    std::unique_lock<std::mutex> lock(s.mu);
    for (;;) {
      s.work.wait_for(lock, s.idle_exit, [&] { return s.stop || !s.tasks.empty(); });
      if (s.tasks.empty()) {  // idle past idle_exit, or stopped with nothing left
        --s.available;
        --s.alive;
        if (s.threads.count(std::this_thread::get_id())) --s.owned;
        s.exited.push_back(std::this_thread::get_id());
        s.ended.notify_all();
        return;
      }
      --s.available;
      std::function<void()> task = std::move(s.tasks.front());
      s.tasks.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // the task's state goes before the thread is offered again
      lock.lock();
      --s.busy;
      ++s.available;
    }
  }
};

TaskThreads::TaskThreads(int max_busy, std::chrono::milliseconds idle_exit, std::string name)
    : st_(std::make_shared<State>(max_busy, idle_exit, std::move(name))) {}

TaskThreads::~TaskThreads() { Join(); }

bool TaskThreads::Run(std::function<void()> task) {
  State& s = *st_;
  std::lock_guard<std::mutex> lock(s.mu);
  if (s.stop || s.busy >= s.max_busy) return false;
  s.ReapLocked();
  if (s.available <= s.tasks.size()) {  // every available thread already has a task coming
    try {
      std::thread t([st = st_] { State::Loop(st); });
      s.threads.emplace(t.get_id(), std::move(t));
    } catch (const std::system_error&) {
      return false;
    }
    ++s.available;
    ++s.alive;
    ++s.owned;
    ++s.started;
  }
  ++s.busy;
  s.tasks.push_back(std::move(task));
  s.work.notify_one();
  return true;
}

void TaskThreads::ForEach(size_t n, const std::function<void(size_t)>& fn) {
  if (n == 0) return;
  std::vector<std::exception_ptr> errors(n);
  std::mutex mu;
  std::condition_variable cv;
  size_t pending = n - 1;
  auto one = [&](size_t i) {
    try {
      fn(i);
    } catch (...) {
      errors[i] = std::current_exception();
    }
  };
  auto done = [&] {
    std::lock_guard<std::mutex> lock(mu);
    if (--pending == 0) cv.notify_all();
  };
  std::vector<size_t> inline_after;  // none could be started: the caller runs them
  for (size_t i = 1; i < n; ++i)
    if (!Run([&, i] { one(i), done(); })) inline_after.push_back(i);
  one(0);
  for (size_t i : inline_after) one(i), done();
  {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return pending == 0; });
  }
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

bool TaskThreads::Join(Clock::time_point deadline) {
  State& s = *st_;
  std::unique_lock<std::mutex> lock(s.mu);
  s.stop = true;
  s.work.notify_all();
  const auto none_alive = [&] { return s.owned == 0; };
  bool all = true;
  if (deadline == Clock::time_point::max()) {  // no deadline: a wait_until would overflow
    s.ended.wait(lock, none_alive);
  } else {
    all = s.ended.wait_until(lock, deadline, none_alive);
  }
  s.ReapLocked();
  for (auto& [id, t] : s.threads)  // past the deadline: still running a task
    if (t.joinable()) t.detach();
  s.threads.clear();
  s.owned = 0;
  s.stop = false;  // joined: tasks are taken again (a server that is started once more)
  return all;
}

int TaskThreads::busy() const {
  std::lock_guard<std::mutex> lock(st_->mu);
  return st_->busy;
}

int64_t TaskThreads::started() const {
  std::lock_guard<std::mutex> lock(st_->mu);
  return st_->started;
}

int TaskThreads::alive() const {
  std::lock_guard<std::mutex> lock(st_->mu);
  return st_->alive;
}

}  // namespace gradpress
