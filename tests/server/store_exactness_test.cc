// The store's exactness with its work outside the lock (server/store_state.h): buckets
// finalized at once on the pushing threads, checkpoints copied meanwhile, readers all along --
// and the bits of a serial run. Assertions run on the main thread only (Catch2's are not
// thread-safe): the threads record what they saw.
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/checkpoint.h"
#include "common/error.h"
#include "compressors/registry.h"
#include "server/parameter_store.h"
#include "tests/temp_dir.h"

namespace gradpress::testing {
namespace {

using compressors::TensorSpec;
using server::Clock;
using server::KeyPayload;
using server::ParameterStore;
using server::WorkerId;

WorkerId Worker(int w) { return {"worker-" + std::to_string(w), 1}; }
Clock::time_point Soon() { return Clock::now() + std::chrono::seconds(60); }

using testing::TempDir;

// Pipelined buckets finalized at once on the pushing threads, checkpoints copied meanwhile,
// heartbeats, Stats, Weights and whole checkpoints read all along: every result, every
// checkpoint file and the final state are those of the same pushes applied one at a time.
// Gradients are multiples of 1/8 in [-1, 1], so sums do not depend on the pushes' order.
TEST_CASE("concurrent finalizes, checkpoints and readers give the serial run's bits",
          "[server][lock]") {
  constexpr int kWorkers = 4, kSteps = 12;
  const std::vector<TensorSpec> model = {{"a", {5000}}, {"b", {3000}}, {"c", {64}}};
  const std::vector<int> buckets = {1, 1, 1};
  auto grads = [&](int w, int64_t step, size_t k) {
    std::vector<float> v(model[k].shape[0]);
    for (size_t e = 0; e < v.size(); ++e)
      v[e] = static_cast<float>((e * 13 + w * 5 + step * 3 + k * 7) % 17) * 0.125f - 1.f;
    return std::vector<KeyPayload>{
        {model[k].key,
         {"none", model[k].shape, compressors::DType::kFloat32,
          std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float))}}};
  };
  struct Run {
    TempDir dir;
    std::unique_ptr<ParameterStore> store;
    std::vector<std::vector<std::string>> results;  // [step][bucket]: worker 0's result bytes
  };
  auto start = [&](Run* run) {
    compressors::RegisterBuiltinCompressors();
    server::StoreOptions o;
    o.workers = kWorkers;
    o.threads = 2;
    o.stats_every = 0;
    o.min_numel = 0;
    o.pull = ParseCodecShorthand("topk ratio=0.05 error_feedback=true then=qsgd levels=16");
    o.shadow_weights = true;
    o.shadow_sgd = {0.1, 0.9, 0.0, false};
    o.checkpoint_dir = run->dir.path;
    o.checkpoint_every = 4;
    run->store = std::make_unique<ParameterStore>(o);
    for (int w = 0; w < kWorkers; ++w) run->store->Register(Worker(w), model, "job", buckets);
    std::vector<KeyPayload> zeros;
    for (size_t k = 0; k < model.size(); ++k) zeros.push_back(grads(0, 99, k)[0]);
    run->store->InitWeights(Worker(0), zeros);
    run->results.assign(kSteps, std::vector<std::string>(model.size()));
  };
  auto keep = [&](Run* run, int64_t step, size_t b) {
    auto r = run->store->Pull(Worker(0), step, Soon(), static_cast<int>(b));
    for (const auto& kp : r->payloads) run->results[step][b] += kp.payload.bytes;
  };

  Run serial;
  start(&serial);
  for (int64_t step = 0; step < kSteps; ++step) {
    for (size_t b = 0; b < model.size(); ++b) {
      for (int w = 0; w < kWorkers; ++w)
        serial.store->PushPull(Worker(w), step, 0, grads(w, step, b), Soon(), false, {}, b);
      keep(&serial, step, b);
    }
  }

  Run concurrent;
  start(&concurrent);
  std::atomic<bool> done{false};
  std::atomic<int> reads{0};
  std::vector<std::string> errors(kWorkers + 1);
  std::vector<std::thread> threads;
  for (int w = 0; w < kWorkers; ++w) {
    threads.emplace_back([&, w] {
      try {
        for (int64_t step = 0; step < kSteps; ++step) {
          for (size_t b = 0; b < model.size(); ++b) {
            concurrent.store->PushPull(Worker(w), step, 0, grads(w, step, b), Soon(), false, {}, b);
          }
          for (size_t b = 0; b < model.size(); ++b) {
            if (w == 0)
              keep(&concurrent, step, b);
            else
              concurrent.store->Pull(Worker(w), step, Soon(), static_cast<int>(b));
          }
        }
      } catch (const std::exception& e) {
        errors[w] = e.what();
      }
    });
  }
  threads.emplace_back([&] {
    try {
      while (!done) {
        concurrent.store->Heartbeat(Worker(1));
        concurrent.store->Stats();
        concurrent.store->Weights(Worker(2));
        concurrent.store->SaveCheckpoint();
        ++reads;
      }
    } catch (const std::exception& e) {
      errors[kWorkers] = e.what();
    }
  });
  for (int w = 0; w < kWorkers; ++w) threads[w].join();
  done = true;
  threads.back().join();
  for (const auto& e : errors) CHECK(e.empty());
  CHECK(reads > 0);
  REQUIRE(concurrent.store->step() == kSteps);
  for (int64_t step = 0; step < kSteps; ++step) {
    for (size_t b = 0; b < model.size(); ++b) {
      INFO("step " << step << " bucket " << b);
      CHECK(concurrent.results[step][b] == serial.results[step][b]);
    }
  }
  const auto files = ListCheckpoints(concurrent.dir.path);
  REQUIRE(files.size() == 3);  // the newest checkpoint_keep of steps 4, 8, 12
  CHECK(files.front().first == kSteps);
  const auto serial_files = ListCheckpoints(serial.dir.path);
  REQUIRE(serial_files.size() == files.size());
  for (size_t i = 0; i < files.size(); ++i) {
    INFO("checkpoint of step " << files[i].first);
    CHECK(files[i].first == serial_files[i].first);
    CHECK(ReadCheckpoint(files[i].second).sections ==
          ReadCheckpoint(serial_files[i].second).sections);
  }
  CHECK(concurrent.store->SaveCheckpoint().sections == serial.store->SaveCheckpoint().sections);
}

// A worker that rejoins from the shadow weights takes the shadow SGD's momentum with them
// (StepEngine::AdoptServerWeights): the buffers are the workers' own update's, buf = 0.9 buf
// + mean, the first step's buf the mean; refused (not_initialized) before a step and where
// the shadow has no momentum.
TEST_CASE("the shadow momentum is the workers' SGD momentum of the step means", "[server]") {
  compressors::RegisterBuiltinCompressors();
  const std::vector<TensorSpec> model = {{"a", {300}}, {"b", {7}}};
  auto grads = [&](int w, int64_t step) {
    std::vector<KeyPayload> out;
    for (const auto& spec : model) {
      std::vector<float> v(spec.shape[0]);
      for (size_t e = 0; e < v.size(); ++e)
        v[e] = static_cast<float>((e * 11 + w * 3 + step * 5) % 13) * 0.25f - 1.5f;
      out.push_back({spec.key,
                     {"none", spec.shape, compressors::DType::kFloat32,
                      std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)}});
    }
    return out;
  };
  auto make = [&](double momentum) {
    server::StoreOptions o;
    o.workers = 2;
    o.stats_every = 0;
    o.min_numel = 0;
    o.shadow_weights = true;
    o.shadow_sgd = {0.1, momentum, 0.0, false};
    auto store = std::make_unique<ParameterStore>(o);
    for (int w = 0; w < 2; ++w) store->Register(Worker(w), model, "job");
    store->InitWeights(Worker(0), grads(0, 99));
    return store;
  };
  auto reason = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.reason();
    }
    return Reason::kUnspecified;
  };
  auto store = make(0.9);
  CHECK(reason([&] { store->ShadowMomentum(Worker(1)); }) == Reason::kNotInitialized);
  std::vector<std::vector<float>> want(model.size());
  for (int64_t step = 0; step < 3; ++step) {
    for (int w = 0; w < 2; ++w) store->PushPull(Worker(w), step, 0, grads(w, step), Soon(), false);
    store->Pull(Worker(0), step, Soon());
    const auto g0 = grads(0, step), g1 = grads(1, step);
    for (size_t k = 0; k < model.size(); ++k) {
      const float* a = reinterpret_cast<const float*>(g0[k].payload.bytes.data());
      const float* b = reinterpret_cast<const float*>(g1[k].payload.bytes.data());
      want[k].resize(model[k].shape[0]);
      for (size_t e = 0; e < want[k].size(); ++e) {
        const float mean = (a[e] + b[e]) * 0.5f;
        want[k][e] = step == 0 ? mean : 0.9f * want[k][e] + mean;
      }
    }
  }
  const auto got = store->ShadowMomentum(Worker(1));
  REQUIRE(got->payloads.size() == model.size());
  double worst = 0;
  for (size_t k = 0; k < model.size(); ++k) {
    const auto& p = got->payloads[k].payload;
    CHECK(p.codec == "none");
    REQUIRE(p.bytes.size() == want[k].size() * 4);
    const float* m = reinterpret_cast<const float*>(p.bytes.data());
    for (size_t e = 0; e < want[k].size(); ++e)
      worst = std::max(worst, static_cast<double>(std::abs(m[e] - want[k][e])));
  }
  CHECK(worst < 1e-6);
  auto plain = make(0.0);
  for (int w = 0; w < 2; ++w) plain->PushPull(Worker(w), 0, 0, grads(w, 0), Soon(), false);
  plain->Pull(Worker(0), 0, Soon());
  CHECK(reason([&] { plain->ShadowMomentum(Worker(1)); }) == Reason::kNotInitialized);
}

}  // namespace
}  // namespace gradpress::testing
