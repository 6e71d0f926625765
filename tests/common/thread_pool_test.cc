// ThreadPool (common/thread_pool.h): ParallelFor runs every item once, rethrows an item's
// error after all ran, and waits for the items, never for a helper thread that took none.
#include "common/thread_pool.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/wait_for.h"

namespace gradpress {
namespace {

using testing::Event;
using testing::WaitFor;

TEST_CASE("ThreadPool::ParallelFor runs every item once, from several callers at once") {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> runs(4000);
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back(
        [&, c] { pool.ParallelFor(1000, [&](int64_t i) { ++runs[c * 1000 + i]; }); });
  }
  for (auto& t : callers) t.join();
  int wrong = 0;
  for (auto& r : runs) wrong += r.load() != 1;
  CHECK(wrong == 0);
}

TEST_CASE("ThreadPool::ParallelFor rethrows an item's error once every item ran") {
  ThreadPool pool(2);
  std::atomic<int> ran{0};
  CHECK_THROWS_WITH(pool.ParallelFor(100,
                                     [&](int64_t i) {
                                       ++ran;
                                       if (i == 7) throw std::runtime_error("item 7");
                                     }),
                    "item 7");
  CHECK(ran.load() == 100);
}

TEST_CASE("ThreadPool::ParallelFor does not wait for a busy helper that took no item") {
  ThreadPool pool(2);  // the caller and one helper
  // Occupy the helper: two items that block until released, one on the helper (the other on
  // the background caller, which then cannot take the helper's item).
  Event release;
  std::atomic<int> entered{0};
  std::thread busy([&] {
    pool.ParallelFor(2, [&](int64_t) {
      ++entered;
      release.Wait();
    });
  });
  REQUIRE(WaitFor([&] { return entered.load() == 2; }));
  // The helper is blocked: a second ParallelFor must run its items on its caller and return.
  Event returned;
  std::atomic<int> ran{0};
  std::thread second([&] {
    pool.ParallelFor(8, [&](int64_t) { ++ran; });
    returned.Set();
  });
  const bool returned_while_busy = returned.Wait(std::chrono::seconds(10));
  release.Set();
  busy.join();
  second.join();
  CHECK(returned_while_busy);
  CHECK(ran.load() == 8);
}

TEST_CASE("ThreadPool names its helper threads") {
  ThreadPool pool(2, "gp-test-pool");  // the caller and one helper
  // Two items that wait for each other: one of them runs on the helper.
  std::atomic<int> entered{0};
  std::mutex mu;
  std::vector<std::string> names;
  pool.ParallelFor(2, [&](int64_t) {
    ++entered;
    WaitFor([&] { return entered.load() == 2; });
    char name[16] = {};
    pthread_getname_np(pthread_self(), name, sizeof(name));
    std::lock_guard<std::mutex> lock(mu);
    names.emplace_back(name);
  });
  REQUIRE(entered.load() == 2);
  CHECK(std::count(names.begin(), names.end(), "gp-test-pool") == 1);
}

}  // namespace
}  // namespace gradpress
