// The server's handler threads (transport/raw_server.h): reused across calls, not one per
// call, free again once the handler returns (not held until the client has read the reply),
// and all ended when ServerRunner::Stop returns, even with a push waiting at the barrier when
// it is called.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <thread>

#include "proto/gradpress.grpc.pb.h"
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

TEST_CASE("a handler's thread is free once it returns, while the client has not read the reply",
          "[transport]") {
  // 12 MiB of weights: more than HTTP/2 flow control lets the server send before the client
  // reads, and within the messages a handler may queue (so the handler itself returns).
  const auto specs = Specs({{3 << 20}});
  server::StoreOptions so;
  so.workers = 1;
  SecureCluster cluster(so);
  worker::GrpcPsClient client(cluster.Client(0));
  client.Register(specs);
  auto params = Zeros(specs);
  client.InitOrPull(&params);

  auto stub = proto::ParameterServer::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(cluster.port), grpc::InsecureChannelCredentials()));
  proto::PullRequest req;
  req.set_worker_id("worker-0");
  req.set_incarnation(cluster.Client(0).incarnation);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(90));
  const uint64_t sent = cluster.runner.store().Stats().bytes_out;
  auto reader = stub->PullWeights(&ctx, req);  // started; nothing read yet
  // The handler has queued the whole reply (its bytes are counted after the last Write) ...
  CHECK(WaitFor([&] { return cluster.runner.store().Stats().bytes_out >= sent + (12u << 20); }));
  // ... and its thread is back in the pool while the reply waits for the client (well before
  // the call's deadline, which would free a thread held until the reply is out).
  CHECK(WaitFor([&] { return cluster.runner.handlers_busy() == 0; }, std::chrono::seconds(20)));
  uint64_t got = 0;
  proto::PullMessage m;
  while (reader->Read(&m))
    for (const proto::TensorChunk& c : m.chunk()) got += c.data().size();
  CHECK(reader->Finish().ok());
  CHECK(got == (12u << 20));  // the whole reply arrives after all
}

}  // namespace
}  // namespace gradpress::testing
