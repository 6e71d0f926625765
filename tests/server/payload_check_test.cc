// Pushes and weights go through one validation (server/payload_check.h): every malformed
// payload is refused by InitWeights, PublishWeights and a push with the same words and the
// same reason, is counted, and changes nothing.
#include <catch2/catch.hpp>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/error.h"
#include "compressors/registry.h"
#include "server/parameter_store.h"

namespace gradpress::testing {
namespace {

using compressors::TensorSpec;
using server::Clock;
using server::KeyPayload;
using server::ParameterStore;

const std::vector<TensorSpec> kModel = {{"w", {64}}, {"b", {4}}};
const server::WorkerId kWorker{"worker-0", 1};

server::StoreOptions Options() {
  server::StoreOptions o;
  o.workers = 1;
  o.threads = 2;
  o.stats_every = 0;
  return o;
}

KeyPayload Floats(const TensorSpec& s, float value) {
  std::vector<float> v(s.shape[0], value);
  return {s.key,
          {"none", s.shape, compressors::DType::kFloat32,
           std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float))}};
}

std::vector<KeyPayload> Good() { return {Floats(kModel[0], 0.5f), Floats(kModel[1], -1.f)}; }

struct Refusal {
  std::string message;  // without the thrower's file:line
  std::string reason;
};

template <class Fn>
Refusal Refused(Fn&& fn) {
  try {
    fn();
  } catch (const InvalidArgument& e) {
    return {e.message(), ReasonName(e.reason())};
  }
  return {"accepted", ""};
}

TEST_CASE("weights and pushes are refused by the same checks, in the same words",
          "[server][validation]") {
  compressors::RegisterBuiltinCompressors();
  ParameterStore fresh(Options());  // no weights yet: InitWeights validates
  fresh.Register(kWorker, kModel, "job");
  ParameterStore running(Options());  // initialised: pushes and PublishWeights validate
  running.Register(kWorker, kModel, "job");
  REQUIRE(running.InitWeights(kWorker, Good()));
  REQUIRE(running.Elect(kWorker, 0, 1.0, Clock::now() + std::chrono::seconds(60)).first == 0);

  struct Case {
    const char* what;
    std::vector<KeyPayload> payloads;
    const char* words;  // in the message
    const char* reason;
  };
  std::vector<Case> cases;
  auto bad = Good();
  reinterpret_cast<float*>(bad[0].payload.bytes.data())[5] = std::numeric_limits<float>::infinity();
  cases.push_back(
      {"Inf", bad, "key 'w': decoded gradient has NaN or Inf at element 5", "non_finite"});
  bad = Good();
  bad[1].payload.shape = {2, 2};
  cases.push_back(
      {"shape", bad, "key 'b': shape [2, 2] does not match the model's [4]", "bad_key_or_shape"});
  bad = Good();
  bad.push_back(Good()[0]);
  cases.push_back({"twice", bad, "key 'w' pushed twice", "bad_key_or_shape"});
  bad = Good();
  bad.pop_back();
  cases.push_back({"missing", bad, "push is missing key 'b'", "bad_key_or_shape"});
  bad = Good();
  bad[1].key = "nope";
  cases.push_back({"unknown key", bad, "unknown key 'nope'", "bad_key_or_shape"});
  bad = Good();
  bad[0].payload.codec = "zstd";
  cases.push_back({"unknown codec", bad, "key 'w': payload does not decode", "undecodable"});
  bad = Good();
  bad[0].payload.codec = "qsgd";  // float32 bytes are not a qsgd payload
  cases.push_back({"bad bytes", bad, "key 'w': payload does not decode", "undecodable"});
  bad = Good();
  bad[1].payload.bytes.pop_back();
  cases.push_back({"short", bad, "key 'b': payload does not decode: none: 15 bytes, expected 16",
                   "undecodable"});

  for (const Case& c : cases) {
    INFO(c.what);
    const Refusal init = Refused([&] { fresh.InitWeights(kWorker, c.payloads); });
    const Refusal publish = Refused([&] { running.PublishWeights(kWorker, 0, c.payloads); });
    const Refusal push = Refused([&] {
      running.PushPull(kWorker, 0, 0, c.payloads, Clock::now() + std::chrono::seconds(60), false);
    });
    CHECK_THAT(init.message, Catch::Contains(c.words));
    CHECK(init.reason == c.reason);
    CHECK(publish.message == init.message);
    CHECK(publish.reason == init.reason);
    CHECK(push.message == init.message);
    CHECK(push.reason == init.reason);
  }
  // Each refusal was counted once per call, by its reason, and nothing changed.
  CHECK(fresh.Stats().rejected.at("bad_key_or_shape") == 4);
  CHECK(running.Stats().rejected.at("bad_key_or_shape") == 8);
  CHECK(running.Stats().rejected.at("undecodable") == 6);
  CHECK(running.Stats().rejected.at("non_finite") == 2);
  CHECK(running.step() == 0);
  CHECK(running.Stats().bytes_in == 0);
  REQUIRE(fresh.InitWeights(kWorker, Good()));
  auto w = running.Weights(kWorker);
  CHECK(w->payloads[0].payload.bytes == Good()[0].payload.bytes);  // PublishWeights applied none
  running.PublishWeights(kWorker, 0, {Floats(kModel[0], 2.f), Floats(kModel[1], 3.f)});
  CHECK(running.Weights(kWorker, 1)->payloads[1].payload.bytes ==
        Floats(kModel[1], 3.f).payload.bytes);
}

}  // namespace
}  // namespace gradpress::testing
