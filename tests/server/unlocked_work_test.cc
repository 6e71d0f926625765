// The store's lock guards bookkeeping only (server/store_state.h): while a bucket is being
// finalized, the async step runs or a checkpoint is copied, Heartbeat, Register, Stats and
// the pushes of another bucket or the next step are answered -- and the results stay exact.
// The heavy work is held in place by a pull codec that waits, inside its EncodeTo or
// SaveState, until the test releases it; everything else waits on conditions with deadlines.
// Assertions run on the main thread only (Catch2's are not thread-safe).
#include <stdlib.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <cstring>
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
#include "tests/wait_for.h"

namespace gradpress::testing {
namespace {

using compressors::TensorSpec;
using server::Clock;
using server::KeyPayload;
using server::ParameterStore;
using server::WorkerId;

// Where the next call of the "gate" codec stops until released (one call, then it is open).
struct Gate {
  enum What { kEncode, kSave };
  explicit Gate(What w) : what(w) {}
  const What what;
  std::atomic<bool> armed{true};
  Event entered, release;
  void Pass(What at) {
    if (at != what || !armed.exchange(false)) return;
    entered.Set();
    release.Wait();
  }
};
std::atomic<Gate*> g_gate{nullptr};

// float32 bytes as they are, like "none", but not lossless: the store encodes with it, so a
// finalize and the async step call its EncodeTo, and a checkpoint its SaveState.
class GateCodec : public compressors::Compressor {
 public:
  std::string Name() const override { return "gate"; }
  void EncodeTo(const float* in, int64_t n, const compressors::StepContext&,
                std::string* out) override {
    if (Gate* g = g_gate.load()) g->Pass(Gate::kEncode);
    out->append(reinterpret_cast<const char*>(in), n * sizeof(float));
  }
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override {
    GP_ENFORCE(bytes.size() == n * sizeof(float), "gate: ", bytes.size(), " bytes for ", n);
    std::memcpy(out, bytes.data(), bytes.size());
  }
  void SaveState(std::string* out) const override {
    if (Gate* g = g_gate.load()) g->Pass(Gate::kSave);
  }
};

// Installs the gate for one test; always opens it at the end, so no thread stays stuck.
struct GateScope {
  explicit GateScope(Gate::What what) : gate(what) {
    static const bool registered = [] {
      compressors::RegisterBuiltinCompressors();
      compressors::RegisterCompressor("gate", [](compressors::ParamReader&) {
        return std::unique_ptr<compressors::Compressor>(new GateCodec);
      });
      return true;
    }();
    (void)registered;
    g_gate = &gate;
  }
  ~GateScope() {
    gate.release.Set();
    g_gate = nullptr;
  }
  Gate gate;
};

// Runs fn on its own thread; Done() is set once it returned or threw (its error kept).
class Call {
 public:
  explicit Call(std::function<void()> fn)
      : thread_([this, fn] {
          try {
            fn();
          } catch (const std::exception& e) {
            error = e.what();
          }
          done_.Set();
        }) {}
  ~Call() { thread_.join(); }
  bool Done() const { return done_.Wait(); }  // within kWaitTimeout
  std::string error;                          // read after Done()

 private:
  Event done_;
  std::thread thread_;
};

const std::vector<TensorSpec> kModel = {{"w", {3000}}, {"b", {7}}};

server::StoreOptions Options(int workers) {
  server::StoreOptions o;
  o.workers = workers;
  o.threads = 2;
  o.stats_every = 0;
  o.min_numel = 0;  // every key encoded with the pull codec
  o.pull.codec = "gate";
  return o;
}

WorkerId Worker(int w) { return {"worker-" + std::to_string(w), 1}; }
Clock::time_point Soon() { return Clock::now() + std::chrono::seconds(60); }

// Worker w's gradients of `step` for keys [first, last): distinct, exactly representable.
std::vector<KeyPayload> Grads(int w, int64_t step, size_t first = 0, size_t last = 2) {
  std::vector<KeyPayload> out;
  for (size_t k = first; k < last; ++k) {
    std::vector<float> v(kModel[k].shape[0]);
    for (size_t e = 0; e < v.size(); ++e)
      v[e] = static_cast<float>((e * 7 + w * 3 + step * 5 + k) % 23) * 0.125f - 1.f;
    out.push_back({kModel[k].key,
                   {"none", kModel[k].shape, compressors::DType::kFloat32,
                    std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)}});
  }
  return out;
}

// The float32 values of a payload ("none" or "gate" bytes).
std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), bytes.size());
  return v;
}

// The mean of two pushes as the store takes it: the first, plus the second, times 1/2.
std::vector<float> Mean(const std::vector<KeyPayload>& a, const std::vector<KeyPayload>& b,
                        size_t k) {
  std::vector<float> x = Floats(a[k].payload.bytes), y = Floats(b[k].payload.bytes);
  for (size_t e = 0; e < x.size(); ++e) x[e] = (x[e] + y[e]) * 0.5f;
  return x;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void Start(ParameterStore& store, int workers, const std::vector<int>& buckets = {}) {
  for (int w = 0; w < workers; ++w) store.Register(Worker(w), kModel, "job", buckets);
  std::vector<KeyPayload> zeros;
  for (const auto& s : kModel) {
    zeros.push_back({s.key,
                     {"none", s.shape, compressors::DType::kFloat32,
                      std::string(s.shape[0] * sizeof(float), '\0')}});
  }
  store.InitWeights(Worker(0), zeros);
}

TEST_CASE("a heartbeat, a register and stats are answered while a bucket is finalized",
          "[server][lock]") {
  GateScope scope(Gate::kEncode);
  ParameterStore store(Options(2));
  Start(store, 2);
  const auto g0 = Grads(0, 0), g1 = Grads(1, 0);
  store.PushPull(Worker(0), 0, 0, g0, Soon(), /*wait=*/false);
  // The second push completes the step: its finalize stops in the pull encode.
  Call last([&] { store.PushPull(Worker(1), 0, 0, g1, Soon(), /*wait=*/false); });
  REQUIRE(scope.gate.entered.Wait());
  int64_t heartbeat_step = -1, stats_steps = -1;
  Call probe([&] {
    heartbeat_step = store.Heartbeat(Worker(0));
    store.Register(Worker(1), kModel, "job");  // the same worker again: a no-op
    stats_steps = store.Stats().steps;
  });
  const bool answered = probe.Done();  // the finalize is still held by the gate
  scope.gate.release.Set();
  REQUIRE(last.Done());
  CHECK(answered);
  CHECK(probe.error.empty());
  CHECK(last.error.empty());
  CHECK(heartbeat_step == 0);  // the step completes with its finalize, not before
  CHECK(stats_steps == 0);
  CHECK(store.step() == 1);
  auto r = store.Pull(Worker(0), 0, Soon());
  REQUIRE(r->payloads.size() == 2);
  for (size_t k = 0; k < 2; ++k)
    CHECK(SameBits(Floats(r->payloads[k].payload.bytes), Mean(g0, g1, k)));
}

TEST_CASE("the next bucket's push lands while a bucket is finalized", "[server][lock]") {
  GateScope scope(Gate::kEncode);
  ParameterStore store(Options(2));
  Start(store, 2, {1, 1});
  const auto a0 = Grads(0, 0, 0, 1), a1 = Grads(1, 0, 0, 1);
  const auto b0 = Grads(0, 0, 1, 2), b1 = Grads(1, 0, 1, 2);
  store.PushPull(Worker(0), 0, 0, a0, Soon(), false, {}, 0);
  Call last([&] { store.PushPull(Worker(1), 0, 0, a1, Soon(), false, {}, 0); });
  REQUIRE(scope.gate.entered.Wait());  // bucket 0's finalize holds its keys
  Call next([&] { store.PushPull(Worker(0), 0, 0, b0, Soon(), false, {}, 1); });
  const bool landed = next.Done();
  scope.gate.release.Set();
  REQUIRE(last.Done());
  CHECK(landed);
  CHECK(next.error.empty());
  store.PushPull(Worker(1), 0, 0, b1, Soon(), false, {}, 1);
  CHECK(store.step() == 1);
  auto r0 = store.Pull(Worker(0), 0, Soon(), 0), r1 = store.Pull(Worker(0), 0, Soon(), 1);
  CHECK(SameBits(Floats(r0->payloads[0].payload.bytes), Mean(a0, a1, 0)));
  CHECK(SameBits(Floats(r1->payloads[0].payload.bytes), Mean(b0, b1, 0)));
}

using testing::TempDir;

TEST_CASE("a checkpoint is copied and written while heartbeats and the next step's pushes go on",
          "[server][lock]") {
  GateScope scope(Gate::kSave);
  TempDir dir;
  auto opts = Options(2);
  opts.exchange_weights = true;  // the weights change every step: a checkpoint shows which
  opts.sgd.lr = 0.5;
  opts.checkpoint_dir = dir.path;
  opts.checkpoint_every = 1;
  ParameterStore store(opts);
  Start(store, 2);
  store.PushPull(Worker(0), 0, 0, Grads(0, 0), Soon(), false);
  // Step 0 completes; the checkpoint of step 1 stops in the pull codec's SaveState.
  Call last([&] { store.PushPull(Worker(1), 0, 0, Grads(1, 0), Soon(), false); });
  REQUIRE(scope.gate.entered.Wait());
  int64_t heartbeat_step = -1;
  Call probe([&] {
    heartbeat_step = store.Heartbeat(Worker(0));
    store.PushPull(Worker(0), 1, 0, Grads(0, 1), Soon(), false);  // lands; cannot finalize yet
  });
  const bool answered = probe.Done();
  scope.gate.release.Set();
  REQUIRE(last.Done());
  CHECK(answered);
  CHECK(probe.error.empty());
  CHECK(heartbeat_step == 1);
  store.PushPull(Worker(1), 1, 0, Grads(1, 1), Soon(), false);  // step 1 completes
  REQUIRE(store.step() == 2);
  // The checkpoint of step 1 holds the weights of step 1 -- the result of step 0 -- not of a
  // later step, though step 1's pushes landed while it was copied.
  const auto files = ListCheckpoints(dir.path);
  REQUIRE(files.size() == 2);
  CHECK(files[0].first == 2);
  REQUIRE(files[1].first == 1);
  const Checkpoint c = ReadCheckpoint(files[1].second);
  const auto w1 = [&] {
    ParameterStore fresh(opts);
    fresh.RestoreCheckpoint(c);
    return fresh.SaveCheckpoint();
  }();
  for (const auto& s : kModel) {
    INFO(s.key);
    CHECK(c.Get("weights/" + s.key) == w1.Get("weights/" + s.key));  // restored bit for bit
  }
  // Step 1's weights are step 0's result: lr 0.5 times the mean from zero weights.
  const auto g0 = Grads(0, 0), g1 = Grads(1, 0);
  for (size_t k = 0; k < kModel.size(); ++k) {
    std::vector<float> expected = Mean(g0, g1, k);
    for (float& x : expected) x = 0.f - 0.5f * (x + 0.f * 0.f);
    CHECK(SameBits(Floats(c.Get("weights/" + kModel[k].key)), expected));
  }
}

TEST_CASE("a heartbeat is answered during the async step", "[server][lock]") {
  GateScope scope(Gate::kEncode);
  auto opts = Options(1);
  opts.async = true;
  opts.exchange_weights = true;
  opts.sgd.lr = 0.25;
  ParameterStore store(opts);
  Start(store, 1);
  const auto g = Grads(0, 0);
  server::PushPullResult applied;
  Call push([&] { applied = store.PushPull(Worker(0), 0, 0, g, Soon()); });
  REQUIRE(scope.gate.entered.Wait());  // SGD done, the new weights' encode held
  int64_t heartbeat_step = -1;
  Call probe([&] { heartbeat_step = store.Heartbeat(Worker(0)); });
  const bool answered = probe.Done();
  scope.gate.release.Set();
  REQUIRE(push.Done());
  CHECK(answered);
  CHECK(push.error.empty());
  CHECK(heartbeat_step == 0);  // the step counts once its weights are encoded
  CHECK(store.step() == 1);
  REQUIRE(applied.result);
  for (size_t k = 0; k < kModel.size(); ++k) {
    std::vector<float> expected = Floats(g[k].payload.bytes);
    for (float& x : expected) x = 0.f - 0.25f * (x + 0.f * 0.f);
    CHECK(SameBits(Floats(applied.result->payloads[k].payload.bytes), expected));
  }
  // A repeat of the applied push is acknowledged with the same weights, not applied again.
  auto again = store.PushPull(Worker(0), 0, 0, g, Soon());
  CHECK(again.duplicate);
  CHECK(again.result == applied.result);
}

}  // namespace
}  // namespace gradpress::testing
