// gradpress.torch's Horovod calls on the server: the root's named bytes to the others
// (Broadcast), a worker that offers no initial weights waiting for the root's (PullWeights
// wait_init), and a per-key lr for the server's SGD (PushHeader.key_lr). Assertions run on the
// test's thread; other threads only record what they saw.
#include <cstring>
#include <future>
#include <string>

#include "tests/server/cluster.h"
#include "tests/wait_for.h"

namespace gradpress::testing {
namespace {

using server::Clock;
using server::ParameterStore;
using server::WorkerId;

const std::vector<TensorSpec> kModel = Specs({{40, 10}, {30}});

Clock::time_point In(double s) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::vector<compressors::KeyPayload> Full(float value) {
  std::vector<compressors::KeyPayload> out;
  for (const auto& s : kModel) out.push_back(NonePayload(s.key, torch::full(s.shape, value)));
  return out;
}

struct Store {
  explicit Store(server::StoreOptions o = Options()) : store(o) {
    store.Register(a, kModel, "job");
    store.Register(b, kModel, "job");
  }
  static server::StoreOptions Options() {
    server::StoreOptions o;
    o.workers = 2;
    o.threads = 2;
    o.max_broadcast_bytes = 1 << 20;
    return o;
  }
  ParameterStore store;
  WorkerId a{"worker-0", 1}, b{"worker-1", 1};
};

}  // namespace

TEST_CASE("broadcast: the root's value in pieces reaches a reader that waited for it",
          "[broadcast]") {
  Store t;
  auto got = std::async(std::launch::async,
                        [&] { return *t.store.BroadcastGet(t.b, "state", 0, In(60)); });
  t.store.BroadcastPut(t.a, "state", 0, 6, 0, "abc");
  CHECK(got.wait_for(std::chrono::milliseconds(0)) == std::future_status::timeout);  // not whole
  t.store.BroadcastPut(t.a, "state", 0, 6, 3, "def");
  CHECK(got.get() == "abcdef");
  // A retried piece changes nothing; the next round replaces the value.
  t.store.BroadcastPut(t.a, "state", 0, 6, 3, "def");
  t.store.BroadcastPut(t.a, "state", 1, 2, 0, "xy");
  CHECK(*t.store.BroadcastGet(t.b, "state", 1, In(1)) == "xy");
}

TEST_CASE("broadcast: bad input is a clear refusal and the store goes on", "[broadcast]") {
  Store t;
  auto refused = [](auto&& fn) -> std::pair<Reason, std::string> {
    try {
      fn();
    } catch (const Error& e) {
      return {e.reason(), e.message()};
    }
    return {Reason::kUnspecified, "not refused"};
  };
  // Over server.max_broadcast_mb (1 MiB here), refused before any byte is kept.
  auto r = refused([&] { t.store.BroadcastPut(t.a, "big", 0, (1 << 20) + 1, 0, "x"); });
  CHECK(r.first == Reason::kBadRequest);
  CHECK_THAT(r.second, Catch::Contains("server.max_broadcast_mb"));
  CHECK_THROWS_AS(t.store.BroadcastPut(t.a, "big", 0, (1 << 20) + 1, 0, "x"), InvalidArgument);
  // Nobody broadcast "never": the reader times out, naming it.
  r = refused([&] { t.store.BroadcastGet(t.b, "never", 0, In(0.05)); });
  CHECK(r.first == Reason::kTimedOut);
  CHECK_THAT(r.second, Catch::Contains("'never'"));
  // A piece out of order, past the value, an empty name.
  CHECK(refused([&] { t.store.BroadcastPut(t.a, "s", 0, 4, 2, "ab"); }).first ==
        Reason::kBadRequest);
  CHECK(refused([&] { t.store.BroadcastPut(t.a, "s", 0, 2, 0, "abc"); }).first ==
        Reason::kBadRequest);
  CHECK(refused([&] { t.store.BroadcastPut(t.a, "", 0, 0, 0, ""); }).first == Reason::kBadRequest);
  // The root is at round 1 while a reader asks round 0: the calls did not match.
  t.store.BroadcastPut(t.a, "s", 0, 1, 0, "0");
  t.store.BroadcastPut(t.a, "s", 1, 1, 0, "1");
  r = refused([&] { t.store.BroadcastGet(t.b, "s", 0, In(1)); });
  CHECK(r.first == Reason::kResultDropped);
  CHECK_THAT(r.second, Catch::Contains("round 1"));
  CHECK(refused([&] { t.store.BroadcastPut(t.a, "s", 0, 1, 0, "0"); }).first ==
        Reason::kResultDropped);
  CHECK(*t.store.BroadcastGet(t.b, "s", 1, In(1)) == "1");  // the store goes on
}

TEST_CASE("a worker that offers no weights waits for the root's (wait_init)", "[broadcast]") {
  Store t;
  // Without wait_init: refused at once, as before.
  CHECK_THROWS_AS(t.store.Weights(t.b, 0, In(1)), FailedPrecondition);
  auto got = std::async(std::launch::async, [&] { return t.store.Weights(t.b, 0, In(60), true); });
  REQUIRE(WaitFor([&] { return t.store.Stats().weights_waiting == 1; }));
  CHECK(t.store.InitWeights(t.a, Full(3.f)));
  const auto r = got.get();
  CHECK(t.store.Stats().weights_waiting == 0);
  REQUIRE(r->payloads.size() == 2);
  float first;
  std::memcpy(&first, r->payloads[1].payload.bytes.data(), sizeof(first));
  CHECK(first == 3.f);
}

TEST_CASE("gRPC: Broadcast of several pieces and AwaitInitWeights", "[broadcast]") {
  Cluster c(TestStoreOptions(2));
  std::string sent(5 << 20, '\0');  // three 2 MiB pieces
  for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>(i * 7 + i / 4096);
  std::string received;
  std::vector<torch::Tensor> waited = Zeros(kModel);
  Cluster::Parallel(2, [&](int w) {
    worker::GrpcPsClient client(c.Client(w));
    client.Register(kModel);
    std::vector<torch::Tensor> params = Zeros(kModel);
    if (w == 1) {  // the root: offers its weights and broadcasts
      for (auto& p : params) p.fill_(2.f);
      client.InitOrPull(&params);
      std::string data = sent;
      client.Broadcast("blob", 0, /*root=*/true, &data);
    } else {  // offers none: waits for the root's weights, then for its bytes
      client.AwaitInitWeights(&waited);
      client.Broadcast("blob", 0, /*root=*/false, &received);
    }
  });
  CHECK(received == sent);
  CHECK(torch::equal(waited[0], torch::full({40, 10}, 2.f)));
  CHECK(torch::equal(waited[1], torch::full({30}, 2.f)));
  // A reader of a name nobody broadcast: FailedPrecondition (timed_out) naming it, no retry,
  // once the server's deadline (0.3 s here, the client's 30 s) has passed.
  Cluster quick(TestStoreOptions(1), /*deadline_s=*/0.3);
  worker::GrpcPsClient late(quick.Client(0));
  late.Register(kModel);
  std::string none;
  try {
    late.Broadcast("never", 0, false, &none);
    FAIL("not refused");
  } catch (const FailedPrecondition& e) {
    CHECK(e.reason() == Reason::kTimedOut);
    CHECK_THAT(e.message(), Catch::Contains("'never'"));
  }
}

TEST_CASE("exchange=weights: each key steps with its own lr (PushHeader.key_lr)", "[broadcast]") {
  auto opts = TestStoreOptions(1);
  opts.exchange_weights = true;
  opts.sgd = {0.5, 0.0, 0.0, false};
  Cluster c(opts);
  worker::GrpcPsClient client(c.Client(0));
  client.Register(kModel);
  std::vector<torch::Tensor> params = {torch::ones({40, 10}), torch::ones({30})};
  client.InitOrPull(&params);
  const std::vector<torch::Tensor> grads = {torch::full({40, 10}, 2.f), torch::full({30}, 2.f)};
  const std::vector<double> key_lr = {0.25, 0.125};
  worker::StepCall call;
  call.step = 0;
  call.lr = 0.5;
  call.key_lr = &key_lr;
  client.PushPull(call, grads, &params);
  CHECK(torch::equal(params[0], torch::full({40, 10}, 0.5f)));  // 1 - 0.25 * 2
  CHECK(torch::equal(params[1], torch::full({30}, 0.75f)));     // 1 - 0.125 * 2
  call.step = 1;
  call.key_lr = nullptr;  // none: lr for every key
  client.PushPull(call, grads, &params);
  CHECK(torch::equal(params[0], torch::full({40, 10}, -0.5f)));
  // A wrong count or a negative lr is refused, naming it; the step is still open.
  const std::vector<double> short_lr = {0.1};
  const std::vector<double> bad_lr = {0.1, -1.0};
  server::ParameterStore& store = c.runner.store();
  CHECK_THROWS_AS(store.PushPull({"worker-0", 1}, 2, 0, Full(1.f), In(1), true, 0.5, -1, short_lr),
                  InvalidArgument);
  CHECK_THROWS_AS(store.PushPull({"worker-0", 1}, 2, 0, Full(1.f), In(1), true, 0.5, -1, bad_lr),
                  InvalidArgument);
  call.step = 2;
  call.key_lr = &key_lr;
  client.PushPull(call, grads, &params);
  CHECK(torch::equal(params[0], torch::full({40, 10}, -1.f)));  // -0.5 - 0.25 * 2
  CHECK(torch::equal(params[1], torch::full({30}, -0.5f)));     // -0.25 - 0.125 * 2
}

}  // namespace gradpress::testing
