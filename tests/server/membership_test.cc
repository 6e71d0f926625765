// Membership end to end: a silent worker is dropped and the barrier goes on, heartbeats keep a
// busy one in, step 0 waits for every expected worker, and a restored server keeps its
// members. Server in-process on 127.0.0.1:0, workers as threads; assertions on the main thread.
#include <future>
#include <string>
#include <tuple>

#include "tests/server/cluster.h"
#include "tests/wait_for.h"

namespace gradpress::testing {
namespace {

TEST_CASE("a worker that stops pushing does not deadlock the barrier", "[server]") {
  auto opts = TestStoreOptions(2);
  opts.worker_timeout_s = 0.5;
  Cluster c(opts);
  const auto specs = Specs({{100}});
  worker::GrpcPsClient quiet(c.Client(1));
  quiet.Register(specs);
  worker::GrpcPsClient active(c.Client(0));
  active.Register(specs);
  auto params = Zeros(specs);
  active.InitOrPull(&params);
  auto out = Zeros(specs);
  auto st = active.PushPull(0, {torch::full({100}, 3.f)}, &out);
  CHECK(st.contributors == 1);  // the quiet worker was dropped; the mean renormalised
  CHECK(out[0].eq(3.f).all().item<bool>());
  CHECK(st.wait_ms > 300);
  // Dropped workers must register again; then they are in the barrier again.
  CHECK_THROWS_AS(quiet.PushPull(1, {torch::ones({100})}, &out), gradpress::FailedPrecondition);
  quiet.Register(specs);
  std::vector<worker::StepMetrics> s(2);
  std::vector<std::vector<torch::Tensor>> o(2, Zeros(specs));
  Cluster::Parallel(2, [&](int w) {
    auto& client = w == 0 ? active : quiet;
    s[w] = client.PushPull(1, {torch::full({100}, static_cast<float>(w))}, &o[w]);
  });
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    CHECK(s[w].contributors == 2);
    CHECK(o[w][0].eq(0.5f).all().item<bool>());
  }
}

TEST_CASE("heartbeats keep a worker that is busy elsewhere in the barrier", "[server]") {
  auto opts = TestStoreOptions(2);
  opts.worker_timeout_s = 0.4;
  Cluster c(opts);
  const auto specs = Specs({{100}});
  auto slow_opts = c.Client(1);
  slow_opts.heartbeat_s = 0.1;
  worker::GrpcPsClient slow(slow_opts);
  slow.Register(specs);
  worker::GrpcPsClient fast(c.Client(0));
  fast.Register(specs);
  auto params = Zeros(specs);
  fast.InitOrPull(&params);
  const uint64_t before = c.runner.store().Stats().bytes_in;
  std::vector<worker::StepMetrics> st(2);
  std::vector<std::vector<torch::Tensor>> out(2, Zeros(specs));
  Cluster::Parallel(2, [&](int w) {
    if (w == 1) {
      // Once the fast worker's push is in and it waits at the barrier, the slow one is busy
      // "evaluating" for 3x the timeout, silent but for its heartbeats. This sleep is the
      // silence under test; the wait before it orders the events.
      GP_ENFORCE(WaitFor([&] { return c.runner.store().Stats().bytes_in > before; }),
                 "the fast worker's push never arrived");
      std::this_thread::sleep_for(std::chrono::milliseconds(1200));
    }
    st[w] = (w == 0 ? fast : slow).PushPull(0, {torch::full({100}, 2.f * w)}, &out[w]);
  });
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    CHECK(st[w].contributors == 2);
    CHECK(out[w][0].eq(1.f).all().item<bool>());
  }
  CHECK(st[0].wait_ms > 1000);  // the barrier held through the whole silence
}

TEST_CASE("step 0 waits for every expected worker to register", "[server]") {
  Cluster c(TestStoreOptions(2));
  const auto specs = Specs({{100}});
  worker::GrpcPsClient early(c.Client(0));
  early.Register(specs);
  auto params = Zeros(specs);
  early.InitOrPull(&params);
  server::ParameterStore& store = c.runner.store();
  const uint64_t before = store.Stats().bytes_in;
  int64_t step_when_late_came = -1;
  worker::StepMetrics st;
  auto out = Zeros(specs);
  Cluster::Parallel(2, [&](int w) {
    if (w == 0) {
      st = early.PushPull(0, {torch::full({100}, 2.f)}, &out);
      return;
    }
    // The late worker registers only once the early one's push is in: the step must still
    // be open then, waiting for it.
    GP_ENFORCE(WaitFor([&] { return store.Stats().bytes_in > before; }),
               "the early worker's push never arrived");
    step_when_late_came = store.step();
    worker::GrpcPsClient client(c.Client(1));
    client.Register(specs);
    auto late_out = Zeros(specs);
    client.PushPull(0, {torch::full({100}, 4.f)}, &late_out);
  });
  CHECK(step_when_late_came == 0);
  CHECK(st.contributors == 2);
  CHECK(out[0].eq(3.f).all().item<bool>());
}

TEST_CASE("a restored server keeps its members: they register again with their rank",
          "[server][restart]") {
  const auto specs = Specs({{100}});
  Checkpoint ckpt;
  std::vector<int> ranks(2);
  {
    Cluster c(TestStoreOptions(2));
    Cluster::Parallel(2, [&](int w) {
      auto o = c.Client(w);
      o.incarnation = 3;
      worker::GrpcPsClient client(o);
      ranks[w] = client.Register(specs).rank;
      auto params = Zeros(specs);
      client.InitOrPull(&params);
      auto out = Zeros(specs);
      for (int64_t step = 0; step < 2; ++step) client.PushPull(step, {torch::ones({100})}, &out);
    });
    ckpt = c.runner.store().SaveCheckpoint();
  }
  Cluster c(TestStoreOptions(2));
  c.runner.store().RestoreCheckpoint(ckpt);
  auto client_options = [&](int w, uint64_t incarnation) {
    auto o = c.Client(w);
    o.incarnation = incarnation;
    return o;
  };
  // Before it registers again a member's calls are refused; so are an older incarnation of
  // it and a newcomer (the membership is full).
  server::ParameterStore& store = c.runner.store();
  CHECK_THROWS_WITH(store.Heartbeat({"worker-1", 3}), Catch::Contains("register again"));
  CHECK_THROWS_WITH(store.Register({"worker-1", 2}, specs, ""), Catch::Contains("older"));
  CHECK_THROWS_WITH(store.Register({"worker-9", 1}, specs, ""), Catch::Contains("one too many"));
  worker::GrpcPsClient w1(client_options(1, 3));
  // Ranks are kept; the step waits until both members are back.
  CHECK(w1.Register(specs).rank == ranks[1]);
  const uint64_t before = store.Stats().bytes_in;
  auto pending = std::async(std::launch::async, [&] {
    auto out = Zeros(specs);
    return w1.PushPull(2, {torch::full({100}, 4.f)}, &out);
  });
  // worker-1's push is in; worker-0 has not registered again yet: the step stays open.
  REQUIRE(WaitFor([&] { return store.Stats().bytes_in > before; }));
  CHECK(store.step() == 2);
  CHECK(pending.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);
  worker::GrpcPsClient w0(client_options(0, 3));
  CHECK(w0.Register(specs).rank == ranks[0]);
  auto out = Zeros(specs);
  auto st0 = w0.PushPull(2, {torch::full({100}, 2.f)}, &out);
  const worker::StepMetrics st1 = pending.get();
  CHECK(st0.contributors == 2);
  CHECK(st1.contributors == 2);
  CHECK(out[0].eq(3.f).all().item<bool>());
  CHECK(c.runner.store().step() == 3);
}

}  // namespace
}  // namespace gradpress::testing
