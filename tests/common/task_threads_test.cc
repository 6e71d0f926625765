// TaskThreads (common/task_threads.h): threads are reused across tasks, every task starts at
// once even when the others block, ForEach rethrows the lowest failing index, and Join waits
// for the threads, or detaches them at its deadline without harm.
#include "common/task_threads.h"

#include <pthread.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

namespace gradpress {
namespace {

TEST_CASE("TaskThreads reuses its threads: their number does not grow with the calls") {
  TaskThreads threads;
  int sum = 0;
  std::mutex mu;
  for (int call = 0; call < 200; ++call) {
    threads.ForEach(3, [&](size_t i) {
      std::lock_guard<std::mutex> lock(mu);
      sum += static_cast<int>(i);
    });
  }
  CHECK(sum == 200 * 3);
  // Two helpers per call; a finished task's thread may not be offered again before the next
  // call starts, so a few more, never one per call.
  CHECK(threads.started() >= 2);
  CHECK(threads.started() <= 8);
}

TEST_CASE("TaskThreads names its threads") {
  TaskThreads threads(8, std::chrono::seconds(30), "gp-test-task");
  std::string name;
  threads.ForEach(2, [&](size_t i) {  // 0 on the caller, 1 on a thread
    if (i != 1) return;
    char buf[16] = {};
    pthread_getname_np(pthread_self(), buf, sizeof(buf));
    name = buf;
  });
  CHECK(name == "gp-test-task");
}

TEST_CASE("TaskThreads starts every task at once, so tasks may wait for each other") {
  TaskThreads threads;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  threads.ForEach(6, [&](size_t) {  // a barrier of 6: a queue would never pass it
    std::unique_lock<std::mutex> lock(mu);
    if (++arrived == 6) cv.notify_all();
    cv.wait(lock, [&] { return arrived == 6; });
  });
  CHECK(arrived == 6);
}

TEST_CASE("TaskThreads::ForEach rethrows the failure of the lowest index, after all ended") {
  TaskThreads threads;
  std::atomic<int> ran{0};
  try {
    threads.ForEach(4, [&](size_t i) {
      ++ran;
      if (i >= 2) throw std::runtime_error("task " + std::to_string(i));
    });
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    CHECK(std::string(e.what()) == "task 2");
  }
  CHECK(ran == 4);
}

TEST_CASE("TaskThreads::Join joins every thread; past its deadline it detaches them") {
  {
    TaskThreads threads;
    threads.ForEach(3, [](size_t) {});
    CHECK(threads.alive() >= 2);
    CHECK(threads.Join(TaskThreads::Clock::now() + std::chrono::seconds(10)));
    CHECK(threads.alive() == 0);
    threads.ForEach(2, [](size_t) {});  // joined threads are started again for new tasks
    CHECK(threads.alive() >= 1);
  }
  std::mutex mu;
  std::condition_variable cv;
  bool release = false, finished = false;
  {
    TaskThreads threads;
    REQUIRE(threads.Run([&] {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return release; });
      finished = true;
      cv.notify_all();
    }));
    const auto start = TaskThreads::Clock::now();
    CHECK_FALSE(threads.Join(start + std::chrono::milliseconds(50)));
    CHECK(TaskThreads::Clock::now() - start < std::chrono::seconds(5));
    CHECK(threads.alive() == 1);
  }  // destroyed with its thread still blocked: the thread keeps the shared state
  std::unique_lock<std::mutex> lock(mu);
  release = true;
  cv.notify_all();
  cv.wait(lock, [&] { return finished; });
}

}  // namespace
}  // namespace gradpress
