// The server's handler threads (transport/raw_server.h): reused across calls, not one per
// call, and all ended when ServerRunner::Stop returns, even with a push waiting at the
// barrier when it is called.
#include <chrono>
#include <thread>

#include "tests/thread_count.h"
#include "tests/transport/harness.h"
#include "tests/wait_for.h"

namespace gradpress::testing {
namespace {

TEST_CASE("the server reuses its handler threads and Stop joins them all", "[transport]") {
  REQUIRE(ThreadsAreCounted());
  const auto specs = Specs({{48, 32}, {10}});
  server::StoreOptions so;
  so.workers = 2;
  so.worker_timeout_s = 60;
  SecureCluster cluster(so);
  std::vector<std::unique_ptr<worker::GrpcPsClient>> clients;
  for (int w = 0; w < 2; ++w)
    clients.push_back(std::make_unique<worker::GrpcPsClient>(cluster.Client(w)));
  auto steps = [&](int from, int to) {
    SecureCluster::Parallel(2, [&](int w) {
      for (int step = from; step < to; ++step) {
        std::vector<torch::Tensor> out = Zeros(specs);
        clients[w]->PushPull(step, Zeros(specs), &out);
      }
    });
  };
  SecureCluster::Parallel(2, [&](int w) {
    clients[w]->Register(specs);
    auto params = Zeros(specs);
    clients[w]->InitOrPull(&params);
  });
  steps(0, 5);  // warm: the handler threads the steps need exist now
  const int64_t before = ThreadsCreated();
  steps(5, 45);  // 80 calls (and the test's own 2 threads per Parallel: 2)
  const int64_t during = ThreadsCreated() - before;
  INFO("threads created over 80 calls: " << during);
  CHECK(during <= 10);
  CHECK(cluster.runner.handler_threads() > 0);

  // Worker 0 pushes step 45 alone: its handler waits at the barrier when Stop is called.
  const uint64_t applied = cluster.runner.store().Stats().bytes_in;
  bool refused = false;  // checked on this thread: Catch's macros are not thread-safe
  std::thread waiting([&] {
    std::vector<torch::Tensor> out = Zeros(specs);
    try {
      clients[0]->PushPull(45, Zeros(specs), &out);
    } catch (const Error&) {
      refused = true;
    }
  });
  // The push is applied (its bytes counted) before its handler waits for worker 1's.
  CHECK(WaitFor([&] { return cluster.runner.store().Stats().bytes_in > applied; }));
  const auto start = std::chrono::steady_clock::now();
  cluster.runner.Stop(0.5);
  CHECK(cluster.runner.handler_threads() == 0);  // ended and joined, not parked
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(8));
  waiting.join();
  CHECK(refused);
}

}  // namespace
}  // namespace gradpress::testing
