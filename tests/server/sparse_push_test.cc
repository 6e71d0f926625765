// Sparse pushes (topk, topk+qsgd, ...) are added into the accumulator from their indices and
// values, in O(payload), with no staging buffer: the sums equal adding each push's dense
// decode element by element in push order, bit for bit -- signs of zero included, since
// -0.0 + 0.0 is +0.0 (server/sparse_accum.h) -- and a malformed push adds nothing.
#include <chrono>
#include <cstring>
#include <future>
#include <random>

#include "common/byte_io.h"
#include "server/parameter_store.h"
#include "server/sgd.h"
#include "tests/server/cluster.h"

namespace gradpress::testing {
namespace {

using compressors::KeyPayload;
using server::ParameterStore;

server::Clock::time_point Soon() { return server::Clock::now() + std::chrono::seconds(20); }
std::string Name(int w) { return "worker-" + std::to_string(w); }

const std::vector<TensorSpec> kModel = Specs({{5000}, {40, 30}});
constexpr int64_t kNumel[] = {5000, 1200};

struct Store : InProcessStore {
  explicit Store(int workers) : InProcessStore(workers, kModel) {}
};

// A "topk" payload with int32 indices, written by hand so that any value (-0.0 too) and
// any index (out of range, out of order) can travel.
KeyPayload Sparse(const std::string& key, const std::vector<int64_t>& shape,
                  const std::vector<int32_t>& idx, const std::vector<float>& val) {
  KeyPayload kp{key, {"topk", shape, compressors::DType::kFloat32, ""}};
  ByteWriter w(&kp.payload.bytes);
  w.Put<uint8_t>(0);
  w.PutVarint(idx.size());
  w.PutBytes(idx.data(), idx.size() * sizeof(int32_t));
  w.PutBytes(val.data(), val.size() * sizeof(float));
  return kp;
}

// Worker w's push of step s: layer0 by hand (collisions, -0.0, +0.0, exact cancellations;
// index 4000 is -0.0 in every push, 4001 only in worker 0's), layer1 a real topk+qsgd
// encode (its level-0 values decode to -0.0 when negative).
std::vector<KeyPayload> Push(int w, int s) {
  std::mt19937 gen(1000 * s + w);
  std::vector<int32_t> idx;
  std::vector<float> val;
  for (int32_t i = 0; i < 600; ++i) {
    if (gen() % 3) continue;  // about a third of the first 600 elements
    idx.push_back(i);
    const uint32_t r = gen() % 10;
    val.push_back(r < 2   ? -0.f
                  : r < 3 ? 0.f
                  : r < 6 ? ((gen() % 2) ? 0.5f : -0.5f)
                          : std::ldexp(static_cast<float>(gen() % 2000) - 1000.f, -7));
  }
  idx.push_back(4000);
  val.push_back(-0.f);
  if (w == 0) {
    idx.push_back(4001);
    val.push_back(-0.f);
  }
  auto gen_t = at::detail::createCPUGenerator(50 + 10 * s + w);
  auto codec = compressors::MakeCompressor(
      ParseCodecShorthand("topk ratio=0.05 then=qsgd levels=4 elias=false"));
  return {Sparse("layer0", {5000}, idx, val),
          {"layer1", codec->Encode(torch::randn({40, 30}, gen_t), {"layer1", s})}};
}

// What the dense path adds up: the first push's dense decode, plus each next one's element
// by element, then the mean as Finalize takes it (times 1 / pushes).
std::vector<std::vector<float>> Reference(const std::vector<std::vector<KeyPayload>>& pushes) {
  std::vector<std::vector<float>> acc(kModel.size());
  for (size_t i = 0; i < kModel.size(); ++i) {
    for (size_t p = 0; p < pushes.size(); ++p) {
      const compressors::Payload& pl = pushes[p][i].payload;
      std::vector<float> d(kNumel[i]);
      compressors::MakeDecoder(pl.codec)->DecodeTo(pl.bytes, kNumel[i], d.data());
      if (p == 0)
        acc[i] = d;
      else
        for (int64_t e = 0; e < kNumel[i]; ++e) acc[i][e] += d[e];
    }
    const float inv = 1.f / static_cast<float>(pushes.size());
    for (float& x : acc[i]) x *= inv;
  }
  return acc;
}

void CheckBitwise(const server::StepResult& r, const std::vector<std::vector<float>>& want) {
  REQUIRE(r.payloads.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    INFO("key " << i);
    const std::string& b = r.payloads[i].payload.bytes;
    REQUIRE(b.size() == want[i].size() * sizeof(float));
    CHECK(std::memcmp(b.data(), want[i].data(), b.size()) == 0);
  }
}

TEST_CASE("sparse pushes add from their indices: no staging buffer, the dense sums bit for bit",
          "[server][sparse]") {
  const int workers = 6;
  Store s(workers);
  for (int step = 0; step < 2; ++step) {  // the second step starts from a fresh accumulator
    std::vector<std::vector<KeyPayload>> pushes;
    for (int w = 0; w < workers; ++w) {
      pushes.push_back(Push(w, step));
      s.store.PushPull({Name(w), 1}, step, step, pushes.back(), Soon(), /*wait=*/false);
    }
    auto r = s.store.Pull({Name(0), 1}, step, Soon());
    REQUIRE(r->contributors == workers);
    const auto want = Reference(pushes);
    CheckBitwise(*r, want);
    CHECK(std::signbit(want[0][4000]));   // -0.0 in every push stays -0.0
    CHECK(!std::signbit(want[0][4001]));  // and becomes +0.0 once a push leaves it out
  }
  CHECK(s.store.Stats().staging_buffers == 0);
}

TEST_CASE("a compressed pull encodes each step's mean as from the dense sums, step after step",
          "[server][sparse]") {
  // The pull codec (error feedback over top-k) carries its residual from step to step, and
  // each step's first push lands on the accumulator that held the last mean: the results must
  // be those of a twin codec encoding the dense path's mean, step after step.
  const int workers = 3;
  server::StoreOptions o = InProcessStore::Options(workers);
  o.pull = ParseCodecShorthand("topk ratio=0.05 error_feedback=true");
  InProcessStore s(kModel, o);
  ParameterStore& store = s.store;
  std::vector<std::unique_ptr<compressors::Compressor>> twin;
  for (size_t i = 0; i < kModel.size(); ++i) twin.push_back(compressors::MakeCompressor(o.pull));
  for (int step = 0; step < 4; ++step) {
    std::vector<std::vector<KeyPayload>> pushes;
    for (int w = 0; w < workers; ++w) {
      pushes.push_back(Push(w, step));
      store.PushPull({Name(w), 1}, step, step, pushes.back(), Soon(), /*wait=*/false);
    }
    auto r = store.Pull({Name(0), 1}, step, Soon());
    REQUIRE(r->payloads.size() == kModel.size());
    const auto mean = Reference(pushes);
    for (size_t i = 0; i < kModel.size(); ++i) {
      INFO("step " << step << " key " << i);
      std::string want;
      twin[i]->EncodeTo(mean[i].data(), kNumel[i], {kModel[i].key, step}, &want);
      CHECK(r->payloads[i].payload.bytes == want);
    }
  }
}

TEST_CASE("dense and sparse pushes mixed in a step add up as the dense path does",
          "[server][sparse]") {
  Store s(4);
  auto dense = [](int w, int step) {  // "none", with -0.0 and +0.0 where the sparse ones land
    auto gen = at::detail::createCPUGenerator(900 + 10 * step + w);
    torch::Tensor a = torch::randn({5000}, gen);
    a.index_put_({torch::indexing::Slice(0, 600, 3)}, -0.0);
    a.index_put_({torch::indexing::Slice(1, 600, 5)}, 0.0);
    a[4000] = -0.0;
    return std::vector<KeyPayload>{NonePayload("layer0", a),
                                   NonePayload("layer1", torch::randn({40, 30}, gen))};
  };
  // Step 0: sparse first (the accumulator's owner), then a dense push, then sparse ones after
  // it (the rows' -0.0 no longer known: one dense pass, then known again). Step 1: dense first.
  const std::vector<std::vector<bool>> is_dense = {{false, true, false, false},
                                                   {true, false, false, true}};
  for (int step = 0; step < 2; ++step) {
    std::vector<std::vector<KeyPayload>> pushes;
    for (int w = 0; w < 4; ++w) {
      pushes.push_back(is_dense[step][w] ? dense(w, step) : Push(w, step));
      s.store.PushPull({Name(w), 1}, step, step, pushes.back(), Soon(), /*wait=*/false);
    }
    auto r = s.store.Pull({Name(0), 1}, step, Soon());
    REQUIRE(r->contributors == 4);
    CheckBitwise(*r, Reference(pushes));
  }
  CHECK(s.store.Stats().staging_buffers == 1);  // dense pushes keep their one buffer
}

TEST_CASE("a malformed sparse push adds nothing, whether first or later", "[server][sparse]") {
  Store s(3);
  const auto good = [](int w) { return Push(w, 0); };
  auto refuse = [&](int w, std::vector<KeyPayload> p, const std::string& what) {
    CHECK_THROWS_WITH(s.store.PushPull({Name(w), 1}, 0, 0, p, Soon(), false),
                      Catch::Contains(what));
  };
  auto with_layer0 = [&](int w, KeyPayload kp) {
    auto p = good(w);
    p[0] = std::move(kp);
    return p;
  };
  // The step's first push (it owns the accumulator) refused: the next one owns it instead.
  refuse(0, with_layer0(0, Sparse("layer0", {5000}, {3, 5000}, {1.f, 2.f})),
         "payload does not decode");
  // A later push refused after its first key decoded fine: nothing of it is added.
  std::vector<std::vector<KeyPayload>> applied;
  applied.push_back(good(1));
  s.store.PushPull({Name(1), 1}, 0, 0, applied.back(), Soon(), false);
  refuse(0, with_layer0(0, Sparse("layer0", {5000}, {7, 9}, {1.f, NAN})),
         "NaN or Inf at element 9");
  refuse(0, with_layer0(0, Sparse("layer0", {5000}, {9, 7}, {1.f, 1.f})), "out of order");
  auto cut = good(0);
  cut[1].payload.bytes.pop_back();
  refuse(0, cut, "key 'layer1': payload does not decode");
  applied.push_back(good(0));
  s.store.PushPull({Name(0), 1}, 0, 0, applied.back(), Soon(), false);
  applied.push_back(good(2));
  s.store.PushPull({Name(2), 1}, 0, 0, applied.back(), Soon(), false);
  auto r = s.store.Pull({Name(0), 1}, 0, Soon());
  REQUIRE(r->contributors == 3);
  CheckBitwise(*r, Reference(applied));
  CHECK(s.store.Stats().rejected.at("undecodable") == 3);
  CHECK(s.store.Stats().rejected.at("non_finite") == 1);
}

TEST_CASE("a sparse push waiting on a first push that fails becomes the accumulator",
          "[server][sparse]") {
  Store s(2);
  auto first = s.store.BeginPush({Name(0), 1}, 0, 0, Soon());  // owns the accumulator
  const auto p1 = Push(1, 0);
  auto second = std::async(std::launch::async, [&] {  // waits for the owner to land
    return s.store.PushPull({Name(1), 1}, 0, 0, p1, Soon(), false);
  });
  CHECK(second.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  {
    const KeyPayload bad = Sparse("layer0", {5000}, {1, 1}, {1.f, 1.f});
    const KeyPayload fine = Push(0, 0)[1];
    for (const KeyPayload* kp : {&bad, &fine}) {
      ParameterStore::Piece piece{kp->key, kp->payload.codec,        kp->payload.shape,
                                  0,       kp->payload.bytes.size(), 0};
      first->Add(piece, kp->payload.bytes);
    }
    CHECK_THROWS_WITH(first->Commit(false), Catch::Contains("out of order"));
    first.reset();  // the session ends: the accumulator is free, nothing in it
  }
  second.get();
  const auto p0 = Push(0, 0);
  s.store.PushPull({Name(0), 1}, 0, 0, p0, Soon(), false);
  auto r = s.store.Pull({Name(0), 1}, 0, Soon());
  REQUIRE(r->contributors == 2);
  CheckBitwise(*r, Reference({p1, p0}));  // worker 1's push came first
  CHECK(s.store.Stats().staging_buffers == 0);
}

}  // namespace
}  // namespace gradpress::testing

namespace gradpress::testing {
namespace {

TEST_CASE("the shadow step from a sparse pull equals SgdStep on its dense decode bit for bit",
          "[server][sparse]") {
  const int64_t n = 3000;
  for (const server::SgdOptions& o :
       {server::SgdOptions{0.1, 0.0, 0.0, false}, server::SgdOptions{0.1, 0.0, 1e-4, false},
        server::SgdOptions{0.05, 0.9, 5e-4, false}, server::SgdOptions{0.05, 0.9, 0.0, true}}) {
    INFO("momentum " << o.momentum << " weight_decay " << o.weight_decay << " nesterov "
                     << o.nesterov);
    std::mt19937 gen(7);
    std::normal_distribution<float> normal;
    std::vector<float> dense_w(n), sparse_w(n);
    for (int64_t i = 0; i < n; ++i) dense_w[i] = (i % 50 == 0) ? -0.f : normal(gen);
    sparse_w = dense_w;
    server::SgdState dense_st, sparse_st;
    for (int step = 0; step < 3; ++step) {  // the first step seeds the momentum buffer
      std::vector<int32_t> idx;
      std::vector<float> val;
      for (int32_t i = step; i < n - 1; i += 7 + step) {
        idx.push_back(i);
        val.push_back(i % 3 == 0 ? -0.f : normal(gen));
      }
      idx.push_back(static_cast<int32_t>(n - 1));  // the last element, kept
      val.push_back(1.f);
      std::vector<float> g(n, 0.f);
      for (size_t j = 0; j < idx.size(); ++j) g[idx[j]] = val[j];
      server::SgdStep(o, dense_w.data(), g.data(), n, &dense_st);
      server::SgdStepSparse(o, sparse_w.data(), idx, val, n, &sparse_st);
      REQUIRE(std::memcmp(dense_w.data(), sparse_w.data(), n * sizeof(float)) == 0);
      const auto& db = dense_st.momentum_buffer;
      const auto& sb = sparse_st.momentum_buffer;
      REQUIRE(db.size() == sb.size());
      CHECK(std::memcmp(db.data(), sb.data(), db.size() * sizeof(float)) == 0);
    }
  }
}

}  // namespace
}  // namespace gradpress::testing
