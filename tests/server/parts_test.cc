// The parameter store's parts on their own: membership, elections, the lanes of the
// aggregation and the model state (the store's behaviour through them is in store_test.cc).
#include <catch2/catch.hpp>
#include <limits>
#include <set>

#include "common/byte_io.h"
#include "common/error.h"
#include "common/thread_pool.h"
#include "server/aggregation.h"
#include "server/elections.h"
#include "server/membership.h"
#include "server/model_state.h"

namespace gradpress::server {
namespace {

TEST_CASE("membership: ranks in registration order, one too many refused", "[server][parts]") {
  Membership m(/*expected=*/2, /*timeout_s=*/30);
  CHECK(m.Join({"b", 1}, 0).rank == 0);
  CHECK(m.Join({"a", 1}, 0).rank == 1);
  CHECK(m.Join({"b", 2}, 0).rank == 0);  // a restarted copy keeps its rank
  CHECK_THROWS_AS(m.Join({"c", 1}, 0), FailedPrecondition);
  CHECK_THROWS_AS(m.Join({"b", 1}, 0), FailedPrecondition);  // older incarnation
  CHECK_THROWS_AS(m.Check({"b", 1}, 0), FailedPrecondition);
  CHECK_THROWS_AS(m.Check({"zz", 1}, 0), NotFound);
  CHECK(m.Check({"b", 2}, 0).rank == 0);
  CHECK(m.Live() == 2);
  CHECK_FALSE(m.Starting(false, 0));
}

TEST_CASE("membership: silent workers are dropped unless inside a call", "[server][parts]") {
  Membership m(2, /*timeout_s=*/0.05);
  m.Join({"a", 1}, 0);
  m.Join({"b", 1}, 0);
  m.Enter("b");
  const auto later = Clock::now() + std::chrono::seconds(1);
  CHECK(m.DropSilent(later, 3) == std::vector<std::string>{"a"});
  CHECK(m.Live() == 1);
  CHECK(m.AllLiveIn(std::set<std::string>{"b"}));
  CHECK_FALSE(m.AllLiveIn(std::set<std::string>{"a"}));
  CHECK_THROWS_AS(m.Check({"a", 1}, 3), FailedPrecondition);  // register again
  m.Leave("b");
  CHECK(m.DropSilent(later + std::chrono::seconds(1), 3) == std::vector<std::string>{"b"});
  m.Join({"a", 1}, 3);  // rejoins
  CHECK(m.Check({"a", 1}, 3).live);
}

TEST_CASE("membership: a restored member must register again and keeps its rank",
          "[server][parts]") {
  Membership m(2, 30);
  m.Join({"a", 4}, 0);
  m.Join({"b", 7}, 0);
  std::string bytes;
  ByteWriter w(&bytes);
  m.Save(&w);
  Membership back(2, 30);
  ByteReader r(bytes, "members");
  back.Restore(&r, "test");
  CHECK(back.Live() == 0);
  CHECK_THROWS_AS(back.Check({"b", 7}, 5), FailedPrecondition);
  CHECK_THROWS_AS(back.Join({"b", 6}, 5), FailedPrecondition);
  CHECK(back.Join({"b", 7}, 5).rank == 1);
  CHECK(back.Starting(false, 5));                               // "a" is still expected
  CHECK_THROWS_AS(back.Join({"c", 1}, 5), FailedPrecondition);  // restored members hold places
}

TEST_CASE("elections: decided once every live member voted, best score then lowest rank",
          "[server][parts]") {
  Membership m(3, 30);
  m.Join({"a", 1}, 0);
  m.Join({"b", 1}, 0);
  m.Join({"c", 1}, 0);
  Elections e;
  e.Vote(0, "c", 0.9);
  e.Vote(0, "b", 0.9);
  CHECK_FALSE(e.Complete(m));
  CHECK(e.Find(0)->best_rank == -1);
  e.Vote(0, "a", 0.5);
  CHECK(e.Complete(m));
  CHECK(e.Find(0)->best_rank == 1);  // b (rank 1) ties c (rank 2) at 0.9
  CHECK(e.Find(0)->best_score == 0.9);
  for (int round = 1; round <= 4; ++round) e.Vote(round, "a", 1.0);
  CHECK(e.Find(0) == nullptr);  // only the last few rounds are kept
}

TEST_CASE("aggregation: lanes cover the keys, keep contributions across a re-split",
          "[server][parts]") {
  Aggregation agg;
  agg.Split({}, 5, 3);
  REQUIRE(agg.size() == 1);
  CHECK(agg.lanes()[0]->begin == 0);
  CHECK(agg.lanes()[0]->end == 5);
  agg.lanes()[0]->last_step["a"] = 2;
  agg.Split({2, 1, 2}, 5, 3);
  REQUIRE(agg.size() == 3);
  CHECK(agg.lanes()[1]->begin == 2);
  CHECK(agg.lanes()[2]->end == 5);
  CHECK(agg.lanes()[2]->LastStep("a") == 2);
  CHECK(agg.Even());
  CHECK(agg.Idle());
  CHECK_THROWS_AS(agg.Of(-1, {"a", 1}), InvalidArgument);
  CHECK_THROWS_AS(agg.Of(3, {"a", 1}), InvalidArgument);
  ++agg.Of(1, {"a", 1}).step;
  CHECK_FALSE(agg.Even());
  CHECK(agg.Joined(3) == nullptr);  // no lane has a result yet
}

TEST_CASE("aggregation: a lane completes once every live member pushed it; mean encoded",
          "[server][parts]") {
  StoreOptions opt;
  ThreadPool pool(2);
  ModelState model(opt, &pool);
  model.Set({{"w", {3}, compressors::DType::kFloat32}, {"v", {2}, compressors::DType::kFloat32}},
            "hash");
  Membership m(2, 30);
  m.Join({"a", 1}, 0);
  m.Join({"b", 1}, 0);
  Aggregation agg;
  agg.Split({1, 1}, model.size(), 0);
  Lane& lane = agg.Of(0, {"a", 1});
  model.key(0).accum = {2.f, 4.f, 6.f};  // two pushes summed
  lane.pushed = {"a"};
  lane.contributors = 1;
  CHECK_FALSE(Aggregation::Ready(lane, m));
  lane.pushed.insert("b");
  lane.contributors = 2;
  REQUIRE(Aggregation::Ready(lane, m));
  auto r = Aggregation::Finalize(lane, &model, opt, &pool);
  CHECK(lane.step == 1);
  CHECK(lane.pushed.empty());
  CHECK(r->contributors == 2);
  REQUIRE(r->payloads.size() == 1);
  CHECK(r->payloads[0].key == "w");
  std::vector<float> mean(3);
  model.Decoder("none").DecodeTo(r->payloads[0].payload.bytes, 3, mean.data());
  CHECK(mean == std::vector<float>{1.f, 2.f, 3.f});
  CHECK(lane.Find(0) == r);
  CHECK_FALSE(agg.Even());  // bucket 1 is still open
}

TEST_CASE("model state: validation names the key and counts the reason", "[server][parts]") {
  StoreOptions opt;
  ThreadPool pool(1);
  ModelState model(opt, &pool);
  model.Set({{"w", {2}, compressors::DType::kFloat32}}, "hash");
  std::vector<std::string> reasons;
  auto reject = [&](const char* reason) { reasons.emplace_back(reason); };
  std::vector<KeyPayload> push(1);
  push[0].key = "w";
  push[0].payload.codec = "none";
  push[0].payload.shape = {2};
  const float bad[2] = {1.f, std::numeric_limits<float>::infinity()};
  push[0].payload.bytes.assign(reinterpret_cast<const char*>(bad), sizeof(bad));
  CHECK_THROWS_WITH(model.Validate(push, reject), Catch::Contains("'w'"));
  push[0].key = "x";
  CHECK_THROWS_AS(model.Validate(push, reject), InvalidArgument);
  CHECK(reasons == std::vector<std::string>{"non_finite", "bad_key_or_shape"});
}

}  // namespace
}  // namespace gradpress::server
