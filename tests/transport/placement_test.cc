// Placement of tensors and their partitions on server shards (transport/placement.h).
#include "transport/placement.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <map>

#include "common/error.h"

namespace gradpress::transport {
namespace {

constexpr int64_t kMiB = (1 << 20) / 4;  // float32 elements in 1 MiB

// Every tensor is covered by its parts exactly once, in order, without gaps.
void CheckCovers(const Placement& p, const std::vector<NamedSize>& tensors) {
  std::map<size_t, int64_t> next;  // tensor -> next expected offset
  for (const PlacedPart& part : p.parts) {
    REQUIRE(part.tensor < tensors.size());
    CHECK(part.offset == next[part.tensor]);
    CHECK(part.numel >= 0);
    CHECK(part.shard >= 0);
    CHECK(part.shard < p.shards);
    next[part.tensor] = part.offset + part.numel;
  }
  for (size_t t = 0; t < tensors.size(); ++t) CHECK(next[t] == tensors[t].second);
  int64_t bytes = 0;
  for (int64_t b : p.shard_bytes) bytes += b;
  int64_t want = 0;
  for (const auto& t : tensors) want += 4 * t.second;
  CHECK(bytes == want);
}

}  // namespace

TEST_CASE("placement: big tensors are cut into near-equal parts whatever the shard count",
          "[placement]") {
  const std::vector<NamedSize> tensors{{"a", 10 * kMiB + 3}, {"b", 4 * kMiB}, {"c", 100}, {"d", 0}};
  for (int shards : {1, 2, 3, 8}) {
    INFO(shards << " shards");
    const Placement p = PlaceLargestFirst(tensors, shards, 4.0);
    CheckCovers(p, tensors);
    // a: 40 MiB + 12 B over 4 MiB -> 3 parts; b: exactly 4 MiB -> whole; c, d whole.
    std::vector<std::string> keys;
    for (const auto& part : p.parts) keys.push_back(part.key);
    CHECK(keys == std::vector<std::string>{"a#0", "a#1", "a#2", "b", "c", "d"});
    CHECK(p.parts[0].numel == (10 * kMiB + 3) / 3);
    CHECK(std::abs(p.parts[2].numel - p.parts[0].numel) <= 1);
    // The parts are the same for every S: only their shards differ.
    const Placement one = PlaceLargestFirst(tensors, 1, 4.0);
    for (size_t i = 0; i < p.parts.size(); ++i) {
      CHECK(p.parts[i].key == one.parts[i].key);
      CHECK(p.parts[i].numel == one.parts[i].numel);
    }
  }
  // No cutting when partition_mb <= 0.
  CHECK(PlaceLargestFirst(tensors, 2, 0).parts.size() == 4);
}

TEST_CASE("placement: a tensor with rows is cut between rows", "[placement]") {
  // A 512 x 4608 conv weight (9 MiB) at 4 MiB: 3 parts of 170, 171 and 171 rows.
  const std::vector<NamedSize> t{{"w", 512 * 4608, 512}, {"two", 2 * 3 * kMiB, 2}};
  const Placement p = PlaceLargestFirst(t, 2, 4.0);
  CheckCovers(p, t);
  REQUIRE(p.parts.size() == 5);
  CHECK(p.parts[0].rows == 170);
  CHECK(p.parts[1].rows == 171);
  CHECK(p.parts[2].rows == 171);
  for (int i = 0; i < 3; ++i) CHECK(p.parts[i].offset % 4608 == 0);
  // 6 MiB in 2 rows: at most one part a row, whatever the size.
  CHECK(p.parts[3].key == "two#0");
  CHECK(p.parts[4].rows == 1);
  CHECK_THROWS_WITH(PlaceLargestFirst({{"bad", 10, 3}}, 1, 4.0),
                    Catch::Contains("not a multiple of its 3 rows"));
}

TEST_CASE("placement: largest first onto the lightest shard, deterministic", "[placement]") {
  // Sizes 7, 5, 4, 3, 3, 2 (x1000) on 2 shards: 7 -> s0, 5 -> s1, 4 -> s1 (9), 3 -> s0 (10),
  // 3 -> s1 (12), 2 -> s0 (12).
  const std::vector<NamedSize> t{{"p3", 3000}, {"p7", 7000}, {"p2", 2000},
                                 {"p5", 5000}, {"q3", 3000}, {"p4", 4000}};
  const Placement p = PlaceLargestFirst(t, 2, 4.0);
  std::map<std::string, int> shard;
  for (const auto& part : p.parts) shard[part.key] = part.shard;
  CHECK(shard == std::map<std::string, int>{
                     {"p7", 0}, {"p5", 1}, {"p4", 1}, {"p3", 0}, {"q3", 1}, {"p2", 0}});
  CHECK(p.shard_bytes == std::vector<int64_t>{48000, 48000});
  CHECK(p.Imbalance() == 1.0);
  CHECK(p.PartsOf(0) == std::vector<size_t>{0, 1, 2});  // p3, p7, p2 in model order
  // The same input gives the same map and hash; another S or another model, another hash.
  CHECK(PlaceLargestFirst(t, 2, 4.0).Hash() == p.Hash());
  CHECK(PlaceLargestFirst(t, 3, 4.0).Hash() != p.Hash());
  auto renamed = t;
  renamed[0].first = "p3x";
  CHECK(PlaceLargestFirst(renamed, 2, 4.0).Hash() != p.Hash());
  // One shard holds everything.
  const Placement one = PlaceLargestFirst(t, 1, 4.0);
  for (const auto& part : one.parts) CHECK(part.shard == 0);
  CHECK(one.Imbalance() == 1.0);
}

TEST_CASE("placement: bin packing balances a VGG-like model better than hashing", "[placement]") {
  // VGG11-BN's CIFAR tensors (conv weights, BN gamma/beta, biases), in model order.
  std::vector<NamedSize> vgg;
  const std::vector<std::pair<int64_t, int64_t>> convs{
      {3, 64}, {64, 128}, {128, 256}, {256, 256}, {256, 512}, {512, 512}, {512, 512}, {512, 512}};
  for (size_t i = 0; i < convs.size(); ++i) {
    const std::string n = "features." + std::to_string(i);
    vgg.push_back({n + ".weight", convs[i].first * convs[i].second * 9});
    vgg.push_back({n + ".bias", convs[i].second});
    vgg.push_back({n + ".bn.weight", convs[i].second});
    vgg.push_back({n + ".bn.bias", convs[i].second});
  }
  vgg.push_back({"classifier.weight", 5120});
  vgg.push_back({"classifier.bias", 10});
  for (int shards : {2, 4, 8}) {
    INFO(shards << " shards");
    const Placement lpt = PlaceLargestFirst(vgg, shards, 4.0);
    const Placement hash = PlaceByHash(vgg, shards, 4.0);
    CheckCovers(lpt, vgg);
    CheckCovers(hash, vgg);
    CHECK(lpt.Imbalance() <= hash.Imbalance());
    if (shards <= 4) CHECK(lpt.Imbalance() <= 1.10);
  }
}

TEST_CASE("placement: bad input is refused with what was wrong", "[placement]") {
  CHECK_THROWS_AS(PlaceLargestFirst({{"a", 1}}, 0, 4.0), InvalidArgument);
  CHECK_THROWS_WITH(PlaceLargestFirst({{"a", -1}}, 1, 4.0), Catch::Contains("'a' has -1"));
  CHECK_THROWS_WITH(PlaceByHash({{"a", 1}, {"a", 2}}, 2, 4.0),
                    Catch::Contains("'a' appears twice"));
}

}  // namespace gradpress::transport
