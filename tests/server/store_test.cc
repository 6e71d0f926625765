// The server and client end to end: server in-process on 127.0.0.1:0, workers as threads.
// Assertions run on the main thread only (Catch2's are not thread-safe): the worker threads
// record what they saw.
#include <future>
#include <string>
#include <tuple>

#include "tests/server/cluster.h"
#include "tests/wait_for.h"

namespace gradpress::testing {
namespace {

// Deterministic per (worker, step, key), from a private generator: safe in threads.
torch::Tensor Grad(int worker, int64_t step, const std::vector<int64_t>& shape, int key) {
  auto gen = at::detail::createCPUGenerator(1000 * step + 10 * worker + key);
  return torch::randn(shape, gen);
}

TEST_CASE("sync, 4 workers, codec none: each worker receives the mean", "[server]") {
  Cluster c(TestStoreOptions(4));
  const auto specs = Specs({{300, 20}, {7}, {1000}});
  // Per worker and step: contributors, and per key max |received - mean|.
  std::vector<std::vector<int>> contributors(4, std::vector<int>(5, -1));
  std::vector<std::vector<std::vector<float>>> error(4, std::vector<std::vector<float>>(5));
  Cluster::Parallel(4, [&](int w) {
    worker::GrpcPsClient client(c.Client(w));
    client.Register(specs);
    auto params = Zeros(specs);
    client.InitOrPull(&params);
    for (int64_t step = 0; step < 5; ++step) {
      std::vector<torch::Tensor> grads, out = Zeros(specs);
      for (size_t k = 0; k < specs.size(); ++k) grads.push_back(Grad(w, step, specs[k].shape, k));
      auto st = client.PushPull(step, grads, &out);
      contributors[w][step] = st.contributors;
      for (size_t k = 0; k < specs.size(); ++k) {
        torch::Tensor mean = torch::zeros(specs[k].shape);
        for (int o = 0; o < 4; ++o) mean += Grad(o, step, specs[k].shape, k);
        mean /= 4;
        error[w][step].push_back((out[k] - mean).abs().max().item<float>());
      }
    }
  });
  for (int w = 0; w < 4; ++w) {
    for (int64_t step = 0; step < 5; ++step) {
      INFO("worker " << w << " step " << step);
      CHECK(contributors[w][step] == 4);
      REQUIRE(error[w][step].size() == specs.size());
      for (float e : error[w][step]) CHECK(e < 1e-6f);
    }
  }
  CHECK(c.runner.store().step() == 5);
  CHECK(c.runner.store().Stats().pushes_applied == 4 * 5);  // scripts/soak.sh's accounting
}

TEST_CASE("exchange=weights: server SGD with momentum matches a reference loop", "[server]") {
  auto opts = TestStoreOptions(2);
  opts.exchange_weights = true;
  opts.sgd = {0.05, 0.9, 1e-3, /*nesterov=*/true};
  Cluster c(opts);
  const auto specs = Specs({{50, 40}, {40}});
  torch::manual_seed(5);
  const std::vector<torch::Tensor> init = {torch::randn({50, 40}), torch::randn({40})};
  std::vector<std::vector<torch::Tensor>> received(2);
  Cluster::Parallel(2, [&](int w) {
    worker::GrpcPsClient client(c.Client(w));
    client.Register(specs);
    std::vector<torch::Tensor> params = {init[0].clone() * (w + 1), init[1].clone() * (w + 1)};
    client.InitOrPull(&params);  // worker-0 or worker-1 wins; both then hold the same
    for (int64_t step = 0; step < 30; ++step) {
      std::vector<torch::Tensor> grads;
      for (size_t k = 0; k < specs.size(); ++k) grads.push_back(Grad(w, step, specs[k].shape, k));
      client.PushPull(step, grads, &params);
    }
    received[w] = params;
  });
  // The server's initial weights were one worker's; find which (both pulled the same).
  for (int first = 0; first < 2; ++first) {
    std::vector<torch::Tensor> w = {init[0] * (first + 1), init[1] * (first + 1)}, buf(2);
    for (int64_t step = 0; step < 30; ++step) {
      for (size_t k = 0; k < 2; ++k) {
        torch::Tensor g = (Grad(0, step, specs[k].shape, k) + Grad(1, step, specs[k].shape, k)) / 2;
        g = g + 1e-3 * w[k];
        buf[k] = step == 0 ? g.clone() : 0.9 * buf[k] + g;
        w[k] = w[k] - 0.05 * (g + 0.9 * buf[k]);
      }
    }
    const double err = std::max((received[0][0] - w[0]).abs().max().item<double>(),
                                (received[0][1] - w[1]).abs().max().item<double>());
    if (err < 1e-3) {
      CHECK(err < 1e-5);
      CHECK(torch::equal(received[0][0], received[1][0]));
      return;
    }
  }
  FAIL("server weights match neither worker's initialisation run through the reference SGD");
}

TEST_CASE("both ways topk then qsgd with error feedback tracks the true mean", "[server]") {
  // Gradients = a fixed signal per element + noise. With error feedback on both sides
  // nothing is lost, only delayed: sum(received) = sum(true means) - server residual -
  // mean(worker residuals). Top-k at ratio r sends each element about once per 1/r steps, so
  // a residual holds up to ~1/r steps of that element's mass: the relative gap after T steps
  // is at most about (1/r) / T = 100 / 200 = 0.5, and it shrinks as T grows (measured 0.62
  // at T = 50 and 0.27 at T = 200). Without feedback the dropped 99% would never arrive.
  auto opts = TestStoreOptions(2);
  opts.pull = ParseCodecShorthand("topk ratio=0.01");
  opts.pull.then = std::make_shared<CodecSpec>(ParseCodecShorthand("qsgd levels=16"));
  opts.pull.error_feedback = true;
  Cluster c(opts);
  const auto specs = Specs({{20000}});
  torch::manual_seed(99);
  const torch::Tensor signal = torch::randn({20000});
  std::vector<double> gap_at(2);
  Cluster::Parallel(2, [&](int w) {
    auto o = c.Client(w, "topk ratio=0.01");
    o.push.then = std::make_shared<CodecSpec>(ParseCodecShorthand("qsgd levels=16"));
    o.push.error_feedback = true;
    o.min_numel = 0;
    worker::GrpcPsClient client(o);
    client.Register(specs);
    auto params = Zeros(specs);
    client.InitOrPull(&params);
    torch::Tensor got = torch::zeros({20000}, torch::kFloat64);
    torch::Tensor want = torch::zeros({20000}, torch::kFloat64);
    for (int64_t step = 0; step < 200; ++step) {
      std::vector<torch::Tensor> out = Zeros(specs);
      client.PushPull(step, {signal + Grad(w, step, {20000}, 0)}, &out);
      got += out[0].to(torch::kFloat64);
      want += (signal + (Grad(0, step, {20000}, 0) + Grad(1, step, {20000}, 0)) / 2)
                  .to(torch::kFloat64);
      if (w == 0 && (step == 49 || step == 199)) {
        gap_at[step == 199] = ((got - want).norm() / want.norm()).item<double>();
      }
    }
  });
  INFO("relative gap at step 50: " << gap_at[0] << ", at step 200: " << gap_at[1]);
  CHECK(gap_at[1] < 0.5);
  CHECK(gap_at[1] < 0.6 * gap_at[0]);
}

TEST_CASE("async: every push applied exactly once, staleness bounded", "[server]") {
  auto opts = TestStoreOptions(2);
  opts.async = true;
  opts.exchange_weights = true;
  opts.sgd = {1.0, 0.0, 0.0, false};
  opts.max_staleness = 3;
  Cluster c(opts);
  const auto specs = Specs({{1000}});
  std::vector<int> duplicates(2, 0);  // asserted on the main thread, after the join
  Cluster::Parallel(2, [&](int w) {
    worker::GrpcPsClient client(c.Client(w));
    client.Register(specs);
    auto params = Zeros(specs);
    client.InitOrPull(&params);
    for (int64_t i = 0; i < 10; ++i) {
      // Gradient (w + 1): the weights end at -(1 + 2) * 10 if each push lands once. A push
      // the other worker made stale meanwhile (a loaded machine) is refused unapplied and
      // sent again on a fresh base, as an async worker does.
      int64_t base = 0;
      for (int attempt = 0;; ++attempt) {
        base = c.runner.store().step();
        try {
          client.Push(i, {torch::full({1000}, static_cast<float>(w + 1))}, base);
          break;
        } catch (const FailedPrecondition&) {
          if (attempt == 20) throw;
        }
      }
      // A retry of the same push is acknowledged and ignored.
      duplicates[w] += client.Push(i, {torch::full({1000}, 100.f)}, base).duplicate;
    }
  });
  CHECK(duplicates == std::vector<int>{10, 10});
  const auto stats = c.runner.store().Stats();
  CHECK(stats.pushes_applied == 20);  // the duplicates acknowledged, not counted
  CHECK(stats.duplicates == 20);
  worker::GrpcPsClient reader(c.Client(0));
  reader.Register(specs);
  auto out = Zeros(specs);
  reader.Pull(&out);
  CHECK(out[0].eq(-30.f).all().item<bool>());
  CHECK(c.runner.store().step() == 20);
  // A push computed on step 20 - 4 is 4 steps stale: refused.
  CHECK_THROWS_WITH(reader.Push(50, {torch::ones({1000})}, 16),
                    Catch::Contains("4 steps stale") && Catch::Contains("max_staleness 3"));
  CHECK_NOTHROW(reader.Push(51, {torch::ones({1000})}, 17));
}

TEST_CASE("elect the best worker, who publishes the weights everyone pulls", "[server]") {
  Cluster c(TestStoreOptions(3));
  const auto specs = Specs({{50}});
  std::vector<std::unique_ptr<worker::GrpcPsClient>> clients;
  for (int w = 0; w < 3; ++w) {  // in order: worker w gets rank w
    clients.push_back(std::make_unique<worker::GrpcPsClient>(c.Client(w)));
    CHECK(clients[w]->Register(specs).rank == w);
  }
  std::vector<int> best(3, -1);
  std::vector<double> best_score(3, -1);
  std::vector<std::string> refused(3);  // the error of a loser's PublishWeights
  std::vector<std::vector<torch::Tensor>> got(3, Zeros(specs));
  Cluster::Parallel(3, [&](int w) {
    auto params = Zeros(specs);
    clients[w]->InitOrPull(&params);
    const double score[3] = {0.5, 0.9, 0.9};  // a tie goes to the lower rank: 1
    std::tie(best[w], best_score[w]) = clients[w]->Elect(/*round=*/0, score[w]);
    std::vector<torch::Tensor> mine = {torch::full({50}, static_cast<float>(w))};
    if (w == best[w]) {
      clients[w]->PublishWeights(0, mine);
    } else {
      try {
        clients[w]->PublishWeights(0, mine);
        refused[w] = "(not refused)";
      } catch (const Error& e) {
        refused[w] = e.what();
      }
    }
    clients[w]->PullWeights(&got[w], /*min_version=*/1);  // waits for the publication
  });
  for (int w = 0; w < 3; ++w) {
    INFO("worker " << w << ": " << refused[w]);
    CHECK(best[w] == 1);
    CHECK(best_score[w] == 0.9);
    if (w != 1) CHECK_THAT(refused[w], Catch::Contains("was not elected"));
    CHECK(got[w][0].eq(1.f).all().item<bool>());
  }
}

TEST_CASE("sync Push then Pull(step) returns the step's mean", "[server]") {
  Cluster c(TestStoreOptions(2));
  const auto specs = Specs({{5000}});
  std::vector<std::vector<int64_t>> server_step(2, std::vector<int64_t>(3, -1));
  std::vector<std::vector<torch::Tensor>> got(2, std::vector<torch::Tensor>(3));
  Cluster::Parallel(2, [&](int w) {
    worker::GrpcPsClient client(c.Client(w));
    client.Register(specs);
    auto params = Zeros(specs);
    client.InitOrPull(&params);
    for (int64_t step = 0; step < 3; ++step) {
      client.Push(step, {torch::full({5000}, static_cast<float>(w + step))});
      auto out = Zeros(specs);
      server_step[w][step] = client.Pull(&out, step).server_step;
      got[w][step] = out[0];
    }
  });
  for (int w = 0; w < 2; ++w) {
    for (int64_t step = 0; step < 3; ++step) {
      INFO("worker " << w << " step " << step);
      CHECK(server_step[w][step] == step);
      CHECK(got[w][step].eq(0.5f + step).all().item<bool>());
    }
  }
}

TEST_CASE("a 50M-element model makes a full push and pull", "[server][slow]") {
  Cluster c(TestStoreOptions(1));
  const auto specs = Specs({{50'000'000}});
  worker::GrpcPsClient client(c.Client(0));
  client.Register(specs);
  std::vector<torch::Tensor> params = {torch::zeros({50'000'000})};
  client.InitOrPull(&params);
  std::vector<torch::Tensor> grads = {torch::arange(50'000'000, torch::kFloat32)};
  std::vector<torch::Tensor> out = {torch::empty({50'000'000})};
  auto st = client.PushPull(0, grads, &out);
  CHECK(st.bytes_up == 200'000'000u);
  CHECK(st.bytes_down == 200'000'000u);
  CHECK(torch::equal(out[0], grads[0]));
}

}  // namespace
}  // namespace gradpress::testing
