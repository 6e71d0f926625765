// Injected faults: $GRADPRESS_FAULTS parsing, determinism, and training runs under lost
// requests, lost replies and server failures that end bit-for-bit where fault-free runs do.
#include "transport/fault_injection.h"

#include <algorithm>
#include <map>

#include "common/shape.h"
#include "tests/transport/harness.h"

namespace gradpress::testing {
namespace {

using transport::FaultInjector;
using transport::FaultOptions;
using transport::ParseFaultSpec;

TEST_CASE("$GRADPRESS_FAULTS parses every key and overrides the config", "[faults]") {
  const FaultOptions o = ParseFaultSpec(
      "drop=0.1,drop_reply=0.05, delay=0.1 ,delay_ms=20,fail=0.02,seed=7", "$GRADPRESS_FAULTS");
  CHECK(o.drop == 0.1);
  CHECK(o.drop_reply == 0.05);
  CHECK(o.delay == 0.1);
  CHECK(o.delay_ms == 20);
  CHECK(o.fail == 0.02);
  CHECK(o.seed == 7);
  CHECK(ParseFaultSpec(o.ToString(), "x").ToString() == o.ToString());
  CHECK_FALSE(ParseFaultSpec("", "x").ClientSide());

  FaultsConfig c;
  c.drop = 0.3;
  c.fail = 0.4;
  c.seed = 5;
  {
    ScopedEnv env(transport::kFaultsEnv, nullptr);
    CHECK(transport::ResolveFaults(c).drop == 0.3);
  }
  ScopedEnv env(transport::kFaultsEnv, "drop=0.5,seed=9");
  const FaultOptions r = transport::ResolveFaults(c);
  CHECK(r.drop == 0.5);  // from the environment
  CHECK(r.seed == 9);
  CHECK(r.fail == 0.4);  // the config's, not named in the environment
}

TEST_CASE("bad $GRADPRESS_FAULTS text names the variable and the item", "[faults]") {
  auto error = [](const char* text) {
    ScopedEnv env(transport::kFaultsEnv, text);
    return ErrorOf([] { transport::ResolveFaults({}); });
  };
  for (const auto& [text, want] : std::vector<std::pair<const char*, const char*>>{
           {"drop=2", "$GRADPRESS_FAULTS: item 'drop=2': drop must be a number in [0, 1]"},
           {"drop=0.1,fial=0.2", "item 'fial=0.2': unknown key 'fial'"},
           {"drop", "item 'drop' is not key=value"},
           {"delay_ms=-5", "item 'delay_ms=-5': delay_ms must be an integer"},
           {"seed=abc", "item 'seed=abc'"},
           {"fail=nan", "item 'fail=nan'"},
           {"drop=", "item 'drop='"}}) {
    const std::string msg = error(text);
    INFO(text << " -> " << msg);
    CHECK(msg.find("$GRADPRESS_FAULTS") != std::string::npos);
    CHECK(msg.find(want) != std::string::npos);
  }
}

TEST_CASE("an injector is deterministic per seed and stream", "[faults]") {
  FaultOptions o;
  o.drop = 0.3;
  o.drop_reply = 0.2;
  o.delay = 0.1;
  o.delay_ms = 1;
  o.fail = 0.25;
  o.seed = 7;
  auto draws = [&](uint64_t stream) {
    FaultInjector inj(o, stream);
    std::string s;
    for (int i = 0; i < 2000; ++i) {
      const auto a = inj.NextAttempt();
      s += char('0' + a.drop + 2 * a.drop_reply + 4 * (a.delay_ms > 0) + 8 * inj.NextFail());
    }
    return s;
  };
  CHECK(draws(1) == draws(1));
  CHECK(draws(1) != draws(2));
  const std::string d = draws(transport::StreamOf("worker-0"));
  auto rate = [&](int bit) {
    double n = 0;
    for (char ch : d) n += ((ch - '0') >> bit) & 1;
    return n / d.size();
  };
  CHECK(rate(0) == Approx(0.3).margin(0.05));
  CHECK(rate(1) == Approx(0.7 * 0.2).margin(0.05));  // a dropped request has no reply
  CHECK(rate(3) == Approx(0.25).margin(0.05));
  FaultOptions all;
  all.drop = 1;
  FaultInjector inj(all);
  for (int i = 0; i < 100; ++i) CHECK(inj.NextAttempt().drop);
  CHECK(inj.injected() == 100);
  FaultInjector none(FaultOptions{});
  for (int i = 0; i < 100; ++i) CHECK_FALSE(none.NextFail());
}

// A dyadic gradient (multiples of 1/8, small): sums are exact in any order, so the server's
// mean does not depend on which worker's push landed first.
torch::Tensor Grad(const TensorSpec& s, int worker, int step, int key) {
  const int64_t numel = NumelOf(s.shape);
  return torch::arange(numel, torch::kFloat32)
      .mul(37 + 13 * worker + 7 * key)
      .add(101 * step + 17 * worker)
      .remainder(128)
      .sub(64)
      .div(8)
      .reshape(s.shape);
}

struct RunResult {
  std::vector<std::vector<torch::Tensor>> received;  // per worker: every step's, concatenated
  uint64_t retries = 0, client_faults = 0;
  server::StoreStats stats;
};

// `workers` workers run `steps` steps of PushPull (or Push then Pull) with the given push
// codec; what each received every step is kept.
RunResult Run(int workers, int steps, const std::string& push, const FaultOptions& client,
              const FaultOptions& server_faults, bool push_then_pull = false) {
  const auto specs = Specs({{48, 32}, {10}});
  server::StoreOptions so;
  so.workers = workers;
  so.worker_timeout_s = 60;
  SecureCluster cluster(so, {}, server_faults);
  RunResult r;
  r.received.resize(workers);
  std::vector<uint64_t> retries(workers), faults(workers), step_sums(workers);
  SecureCluster::Parallel(workers, [&](int w) {
    worker::ClientOptions o = cluster.Client(w, {}, push);
    o.faults = client;
    o.max_retries = 30;
    worker::GrpcPsClient client(o);
    client.Register(specs);
    auto params = Zeros(specs);
    client.InitOrPull(&params);
    int step_retries = 0;
    for (int step = 0; step < steps; ++step) {
      std::vector<torch::Tensor> grads, out = Zeros(specs);
      for (size_t k = 0; k < specs.size(); ++k)
        grads.push_back(Grad(specs[k], w, step, static_cast<int>(k)));
      if (push_then_pull) {
        step_retries += client.Push(step, grads).retries;
        step_retries += client.Pull(&out, step).retries;
      } else {
        step_retries += client.PushPull(step, grads, &out).retries;
      }
      for (auto& t : out) r.received[w].push_back(t.flatten());
    }
    step_sums[w] = static_cast<uint64_t>(step_retries);
    retries[w] = client.retries();
    faults[w] = client.faults_injected();
  });
  for (int w = 0; w < workers; ++w) {
    CHECK(step_sums[w] <= retries[w]);  // StepMetrics::retries: the steps' share of them
    r.retries += retries[w];
    r.client_faults += faults[w];
  }
  r.stats = cluster.runner.store().Stats();
  return r;
}

void CheckSame(const RunResult& a, const RunResult& b) {
  REQUIRE(a.received.size() == b.received.size());
  for (size_t w = 0; w < a.received.size(); ++w) {
    REQUIRE(a.received[w].size() == b.received[w].size());
    for (size_t i = 0; i < a.received[w].size(); ++i) {
      INFO("worker " << w << ", tensor " << i);
      REQUIRE(torch::equal(a.received[w][i], b.received[w][i]));
    }
  }
}

TEST_CASE("lost requests and replies change nothing: the run ends bit for bit", "[faults]") {
  FaultOptions lossy;
  lossy.drop = 0.1;
  lossy.drop_reply = 0.1;
  lossy.seed = 7;
  for (const std::string push : {"none", "topk ratio=0.1 error_feedback=true"}) {
    INFO(push);
    const RunResult clean = Run(3, 50, push, {}, {});
    const RunResult faulty = Run(3, 50, push, lossy, {});
    CheckSame(clean, faulty);
    CHECK(clean.retries == 0);
    CHECK(faulty.retries > 0);
    CHECK(faulty.client_faults > 0);
    CHECK(faulty.stats.duplicates > 0);  // lost replies were retried and acknowledged
    CHECK(faulty.stats.steps == clean.stats.steps);
    CHECK(faulty.stats.rejected.empty());
    CHECK(faulty.stats.Prometheus().find("gradpress_duplicate_pushes_total " +
                                         std::to_string(faulty.stats.duplicates)) !=
          std::string::npos);
  }
}

TEST_CASE("Push then Pull under lost replies ends bit for bit", "[faults]") {
  FaultOptions lossy;
  lossy.drop = 0.1;
  lossy.drop_reply = 0.15;
  lossy.delay = 0.05;
  lossy.delay_ms = 1;
  const RunResult clean = Run(2, 30, "qsgd levels=16 error_feedback=true", {}, {}, true);
  const RunResult faulty = Run(2, 30, "qsgd levels=16 error_feedback=true", lossy, {}, true);
  CheckSame(clean, faulty);
  CHECK(faulty.retries > 0);
  CHECK(faulty.stats.duplicates > 0);
}

TEST_CASE("server failures are retried and counted and the run ends bit for bit", "[faults]") {
  FaultOptions fail;
  fail.fail = 0.2;
  fail.seed = 3;
  const RunResult clean = Run(3, 50, "none", {}, {});
  const RunResult faulty = Run(3, 50, "none", {}, fail);
  CheckSame(clean, faulty);
  CHECK(faulty.retries > 0);
  CHECK(faulty.stats.faults_injected > 0);
  CHECK(faulty.stats.faults_injected == faulty.retries);  // every failure was retried once
  CHECK(faulty.stats.Prometheus().find("gradpress_faults_injected_total " +
                                       std::to_string(faulty.stats.faults_injected)) !=
        std::string::npos);
}

// Register, InitWeights, Elect, PublishWeights and PullWeights answer a retried call as they
// answered the lost one.
TEST_CASE("every call survives lost replies with the same answer", "[faults]") {
  const auto specs = Specs({{40, 30}, {5}});
  server::StoreOptions so;
  so.workers = 3;
  SecureCluster cluster(so);
  FaultOptions lossy;
  lossy.drop_reply = 0.5;
  lossy.seed = 11;
  std::vector<int> accepted(3), ranks(3), reranks(3), best(3);
  std::vector<double> scores(3);
  std::vector<uint64_t> retries(3);
  std::vector<torch::Tensor> inits(3), pulled(3);
  SecureCluster::Parallel(3, [&](int w) {
    worker::ClientOptions o = cluster.Client(w);
    o.faults = lossy;
    o.max_retries = 40;
    worker::GrpcPsClient client(o);
    ranks[w] = client.Register(specs).rank;
    reranks[w] = client.Register(specs).rank;  // a second Register is the first's twin
    std::vector<torch::Tensor> params;
    for (const auto& s : specs) params.push_back(torch::full(s.shape, float(w + 1)));
    accepted[w] = client.InitOrPull(&params);
    inits[w] = params[1].clone();
    auto out = Zeros(specs);
    client.PushPull(0, params, &out);  // the barrier: everyone registered before the vote
    const auto [rank, score] = client.Elect(0, 0.5 + w);
    best[w] = rank;
    scores[w] = score;
    std::vector<torch::Tensor> mine;
    for (const auto& s : specs) mine.push_back(torch::full(s.shape, 100.f + w));
    if (rank == ranks[w]) {
      client.PublishWeights(0, mine);
      client.PublishWeights(0, mine);  // a repeat is acknowledged, not refused
    }
    auto got = Zeros(specs);
    client.PullWeights(&got, 1);
    pulled[w] = got[0];
    retries[w] = client.retries();
  });
  CHECK(retries[0] + retries[1] + retries[2] > 0);
  CHECK(reranks == ranks);
  CHECK(accepted[0] + accepted[1] + accepted[2] == 1);  // exactly one init won, and knows it
  const int won =
      static_cast<int>(std::find(accepted.begin(), accepted.end(), 1) - accepted.begin());
  for (const auto& t : inits) CHECK(torch::equal(t, torch::full_like(t, float(won + 1))));
  CHECK(scores == std::vector<double>(3, 2.5));
  const int winner =
      static_cast<int>(std::find(ranks.begin(), ranks.end(), best[0]) - ranks.begin());
  CHECK(best[1] == best[0]);
  CHECK(best[2] == best[0]);
  CHECK(winner == 2);  // highest score
  for (const auto& p : pulled) CHECK(torch::equal(p, torch::full_like(p, 102.f)));
}

TEST_CASE("a fault that always fires ends the call after max_retries, clearly", "[faults]") {
  server::StoreOptions so;
  so.workers = 1;
  SecureCluster cluster(so);
  worker::ClientOptions o = cluster.Client(0);
  o.faults.drop = 1.0;
  o.max_retries = 2;
  worker::GrpcPsClient client(o);
  std::string msg;
  try {
    client.Register(Specs({{4}}));
  } catch (const Unavailable& e) {
    msg = e.what();
  }
  INFO(msg);
  CHECK(msg.find("Register to 127.0.0.1:") != std::string::npos);
  CHECK(msg.find("failed after 3 attempts") != std::string::npos);
  CHECK(msg.find("injected fault: request dropped") != std::string::npos);
  CHECK(client.retries() == 2);
  CHECK(client.faults_injected() == 3);
  CHECK(cluster.runner.store().Stats().live_workers == 0);  // nothing reached the server

  FaultOptions fail;
  fail.fail = 1.0;
  SecureCluster failing(so, {}, fail);
  worker::ClientOptions f = failing.Client(0);
  f.max_retries = 1;
  CHECK(ErrorOf([&] { worker::GrpcPsClient(f).Register(Specs({{4}})); })
            .find("failed after 2 attempts (server unavailable); last error: Register: injected "
                  "fault") != std::string::npos);
  CHECK(failing.runner.store().Stats().faults_injected == 2);
}

}  // namespace
}  // namespace gradpress::testing
