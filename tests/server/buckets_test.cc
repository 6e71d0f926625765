// Per-bucket completion (the pipelined step): a model registered in buckets completes each
// bucket on its own, so one bucket's result is served while another still waits.
// Assertions run on the test's thread; other threads only record what they saw.
#include <cstring>
#include <future>

#include "tests/server/cluster.h"

namespace gradpress::testing {
namespace {

using server::Clock;
using server::ParameterStore;
using server::WorkerId;

const std::vector<TensorSpec> kModel = Specs({{40, 10}, {30}, {20}});  // 3 keys

server::StoreOptions Options(bool weights = false) {
  server::StoreOptions o;
  o.workers = 2;
  o.threads = 2;
  o.worker_timeout_s = 30;
  o.exchange_weights = weights;
  o.sgd.lr = 0.5;
  return o;
}

Clock::time_point In(double s) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

// The keys [begin, end) of kModel, every element = value.
std::vector<compressors::KeyPayload> Push(size_t begin, size_t end, float value) {
  std::vector<compressors::KeyPayload> out;
  for (size_t i = begin; i < end; ++i)
    out.push_back(NonePayload(kModel[i].key, torch::full(kModel[i].shape, value)));
  return out;
}

float First(const server::StepResult& r, size_t i) {
  float v;
  std::memcpy(&v, r.payloads[i].payload.bytes.data(), sizeof(v));
  return v;
}

struct TwoWorkers {
  explicit TwoWorkers(server::StoreOptions o = Options()) : store(o) {
    store.Register(a, kModel, "job", {1, 2});  // bucket 0: key 0; bucket 1: keys 1-2
    store.Register(b, kModel, "job", {1, 2});
    store.InitWeights(a, Push(0, 3, 1.f));
  }
  ParameterStore store;
  WorkerId a{"worker-0", 1}, b{"worker-1", 1};
};

}  // namespace

TEST_CASE("a bucket completes when every worker pushed it, before the other buckets", "[buckets]") {
  TwoWorkers t;
  REQUIRE(t.store.buckets() == 2);
  t.store.PushPull(t.a, 0, 0, Push(0, 1, 2.f), In(10), /*wait=*/false, {}, 0);
  t.store.PushPull(t.a, 0, 0, Push(1, 3, 2.f), In(10), /*wait=*/false, {}, 1);
  // worker-1 pushes bucket 0 only: its result comes back although bucket 1 is still open.
  const auto r = t.store.PushPull(t.b, 0, 0, Push(0, 1, 4.f), In(10), true, {}, 0);
  REQUIRE(r.result != nullptr);
  REQUIRE(r.result->payloads.size() == 1);
  CHECK(r.result->payloads[0].key == kModel[0].key);
  CHECK(First(*r.result, 0) == 3.f);  // mean of 2 and 4
  CHECK(t.store.step() == 0);         // the step is not complete before its last bucket
  // A push of the next step to the finished bucket is ahead of the server's step.
  CHECK_THROWS_AS(t.store.PushPull(t.a, 1, 0, Push(0, 1, 1.f), In(1), false, {}, 0),
                  FailedPrecondition);
  const auto r1 = t.store.PushPull(t.b, 0, 0, Push(1, 3, 6.f), In(10), true, {}, 1);
  REQUIRE(r1.result->payloads.size() == 2);
  CHECK(First(*r1.result, 0) == 4.f);
  CHECK(First(*r1.result, 1) == 4.f);
  CHECK(t.store.step() == 1);
  // Pull without a bucket joins every bucket's result of the step, in model order.
  const auto joined = t.store.Pull(t.a, 0, In(1));
  REQUIRE(joined->payloads.size() == 3);
  CHECK(joined->payloads[2].key == kModel[2].key);
  CHECK(First(*joined, 0) == 3.f);
  CHECK(First(*joined, 2) == 4.f);
}

TEST_CASE("bucket 0 is pulled while bucket 1 is still being pushed (threads)", "[buckets]") {
  TwoWorkers t;
  // worker-0 waits on bucket 1 in another thread; bucket 0 completes meanwhile.
  auto pending = std::async(std::launch::async, [&] {
    return t.store.PushPull(t.a, 0, 0, Push(1, 3, 1.f), In(10), true, {}, 1);
  });
  t.store.PushPull(t.a, 0, 0, Push(0, 1, 1.f), In(10), false, {}, 0);
  const auto r0 = t.store.PushPull(t.b, 0, 0, Push(0, 1, 3.f), In(10), true, {}, 0);
  CHECK(First(*r0.result, 0) == 2.f);
  CHECK(pending.wait_for(std::chrono::milliseconds(0)) != std::future_status::ready);
  t.store.PushPull(t.b, 0, 0, Push(1, 3, 3.f), In(10), false, {}, 1);
  const auto r1 = pending.get();
  CHECK(First(*r1.result, 1) == 2.f);
}

TEST_CASE("exchange=weights: each bucket steps SGD on its own keys", "[buckets]") {
  TwoWorkers t(Options(/*weights=*/true));
  t.store.PushPull(t.a, 0, 0, Push(0, 1, 1.f), In(10), false, {}, 0);  // bucket 0: key 0
  const auto r = t.store.PushPull(t.b, 0, 0, Push(0, 1, 3.f), In(10), true, {}, 0);
  CHECK(First(*r.result, 0) == 1.f - 0.5f * 2.f);  // w - lr * mean
}

TEST_CASE("buckets: a different split, a whole-model push or a wrong bucket are refused",
          "[buckets]") {
  TwoWorkers t;
  ParameterStore& s = t.store;
  CHECK_THROWS_AS(s.Register({"worker-0", 2}, kModel, "job", {2, 1}), FailedPrecondition);
  CHECK_THROWS_AS(s.Register({"worker-0", 2}, kModel, "job", {}), FailedPrecondition);
  CHECK_THROWS_AS(s.Register({"worker-0", 2}, kModel, "job", {1, 1}), InvalidArgument);
  CHECK_THROWS_AS(s.PushPull(t.a, 0, 0, Push(0, 3, 1.f), In(1), false), InvalidArgument);
  CHECK_THROWS_AS(s.PushPull(t.a, 0, 0, Push(0, 1, 1.f), In(1), false, {}, 2), InvalidArgument);
  CHECK_THROWS_AS(s.PushPull(t.a, 0, 0, Push(0, 1, 1.f), In(1), false, {}, 1), InvalidArgument);
  // Nothing of that was applied: the step completes with the pushes that follow.
  s.PushPull(t.a, 0, 0, Push(0, 1, 1.f), In(10), false, {}, 0);
  s.PushPull(t.a, 0, 0, Push(1, 3, 1.f), In(10), false, {}, 1);
  s.PushPull(t.b, 0, 0, Push(0, 1, 1.f), In(10), false, {}, 0);
  s.PushPull(t.b, 0, 0, Push(1, 3, 1.f), In(10), false, {}, 1);
  CHECK(s.step() == 1);
}

TEST_CASE("a repeated push of a finished bucket is answered with its result, not applied",
          "[buckets]") {
  TwoWorkers t;
  t.store.PushPull(t.a, 0, 0, Push(0, 1, 2.f), In(10), false, {}, 0);
  t.store.PushPull(t.b, 0, 0, Push(0, 1, 4.f), In(10), false, {}, 0);
  t.store.PushPull(t.a, 0, 0, Push(1, 3, 2.f), In(10), false, {}, 1);
  // worker-1 pushes bucket 0 of step 0 again (a retry after a lost reply): acknowledged,
  // not applied twice, answered with the bucket's result.
  const auto again = t.store.PushPull(t.b, 0, 0, Push(0, 1, 100.f), In(10), true, {}, 0);
  CHECK(again.duplicate);
  CHECK(First(*again.result, 0) == 3.f);
}

}  // namespace gradpress::testing
