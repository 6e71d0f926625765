// Sharding by rank and epoch, batch gathering, normalisation, augmentation and the synthetic set.
#include "worker/data/sampler.h"

#include <algorithm>
#include <set>

#include "tests/catch_torch.h"
#include "tests/worker/data/test_util.h"
#include "worker/data/random.h"
#include "worker/data/synthetic.h"
#include "worker/data/transforms.h"

namespace gradpress::worker::data {
namespace {

using Catch::Matchers::Contains;
using testing::InvalidArgumentMessage;

TEST_CASE("shards are disjoint, equal-sized and cover the set", "[sampler]") {
  for (int64_t n : {1000, 1003, 7}) {
    for (int world : {1, 2, 3, 4, 7}) {
      INFO("n=" << n << " world=" << world);
      std::set<int64_t> seen;
      for (int rank = 0; rank < world; ++rank) {
        const std::vector<int64_t> mine = EpochIndices(n, rank, world, 3, 42);
        REQUIRE(static_cast<int64_t>(mine.size()) == n / world);
        REQUIRE(static_cast<int64_t>(mine.size()) == ShardSize(n, world));
        for (int64_t i : mine) {
          REQUIRE(i >= 0);
          REQUIRE(i < n);
          REQUIRE(seen.insert(i).second);  // no overlap within or across ranks
        }
      }
      // Exactly the last n % world entries of the epoch's permutation are dropped.
      const std::vector<int64_t> perm = EpochPermutation(n, 3, 42);
      CHECK(static_cast<int64_t>(seen.size()) == n - n % world);
      for (int64_t k = n - n % world; k < n; ++k) CHECK(seen.count(perm[k]) == 0);
    }
  }
}

TEST_CASE("the permutation is the same on every rank and changes with epoch and seed",
          "[sampler]") {
  const std::vector<int64_t> perm = EpochPermutation(1000, 5, 9);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) REQUIRE(sorted[i] == i);
  CHECK(EpochPermutation(1000, 5, 9) == perm);
  for (int rank = 0; rank < 4; ++rank) {
    const std::vector<int64_t> mine = EpochIndices(1000, rank, 4, 5, 9);
    for (size_t k = 0; k < mine.size(); ++k) REQUIRE(mine[k] == perm[rank + 4 * k]);
    CHECK(EpochIndices(1000, rank, 4, 5, 9) == mine);
  }
  CHECK(EpochPermutation(1000, 6, 9) != perm);
  CHECK(EpochPermutation(1000, 5, 10) != perm);
  CHECK(EpochIndices(1000, 0, 4, 0, 9) != EpochIndices(1000, 0, 4, 1, 9));
}

TEST_CASE("sampler arguments are checked", "[sampler]") {
  CHECK_THAT(InvalidArgumentMessage([] { EpochIndices(10, 2, 2, 0, 0); }),
             Contains("rank 2 is outside [0, 2)"));
  CHECK_THAT(InvalidArgumentMessage([] { EpochIndices(10, -1, 2, 0, 0); }),
             Contains("rank -1 is outside"));
  CHECK_THAT(InvalidArgumentMessage([] { EpochIndices(10, 0, 0, 0, 0); }),
             Contains("world size 0"));
  CHECK_THAT(InvalidArgumentMessage([] { EpochIndices(3, 0, 4, 0, 0); }),
             Contains("cannot shard 3 examples across 4 ranks"));
  CHECK_THAT(InvalidArgumentMessage([] { EpochIndices(10, 0, 1, -1, 0); }), Contains("epoch -1"));
}

TEST_CASE("GatherBatch takes the indexed examples in order", "[transforms]") {
  const Dataset d{torch::arange(10 * 2 * 3, torch::kFloat32).view({10, 1, 2, 3}),
                  torch::arange(10, torch::kInt64)};
  const std::vector<int64_t> idx = {7, 2, 9, 2, 0};
  const Dataset b = GatherBatch(d, idx, 1, 4);
  REQUIRE(b.images.sizes() == torch::IntArrayRef({3, 1, 2, 3}));
  CHECK(torch::equal(b.labels, torch::tensor({2, 9, 2}, torch::kInt64)));
  CHECK(torch::equal(b.images[1], d.images[9]));
  CHECK(GatherBatch(d, idx, 3, 100).size() == 2);  // end is clamped
  CHECK(GatherBatch(d, {}, 0, 0).images.sizes() == torch::IntArrayRef({0, 1, 2, 3}));
  CHECK_THAT(InvalidArgumentMessage([&] {
               GatherBatch(d, {3, 10}, 0, 2);
             }),
             Contains("index 10 at position 1 is outside a dataset of 10 examples"));
}

TEST_CASE("NormalizeImages maps x to (x / 255 - mean) / std per channel", "[transforms]") {
  const torch::Tensor x = torch::tensor({0, 255, 51, 102}, torch::kUInt8).view({1, 2, 1, 2});
  const torch::Tensor y = NormalizeImages(x, {0.5, 0.1}, {0.25, 0.2});
  const torch::Tensor want =
      torch::tensor({(0 - 0.5) / 0.25, (1 - 0.5) / 0.25, (0.2 - 0.1) / 0.2, (0.4 - 0.1) / 0.2},
                    torch::kFloat32)
          .view({1, 2, 1, 2});
  CHECK(torch::allclose(y, want, 1e-6, 1e-6));
  CHECK_THAT(InvalidArgumentMessage([&] { NormalizeImages(x, {0.5}, {0.25}); }),
             Contains("2 channels but 1 means"));
}

// Whether out is some crop (dy, dx) of the padded image, possibly flipped.
bool IsCropOrFlippedCrop(const torch::Tensor& padded, const torch::Tensor& out, int64_t pad) {
  const int64_t h = out.size(1), w = out.size(2);
  for (int64_t dy = 0; dy <= 2 * pad; ++dy)
    for (int64_t dx = 0; dx <= 2 * pad; ++dx) {
      const torch::Tensor crop = padded.narrow(1, dy, h).narrow(2, dx, w);
      if (torch::equal(crop, out) || torch::equal(crop.flip({2}), out)) return true;
    }
  return false;
}

TEST_CASE("AugmentCifar crops the padded image and flips, seeded per image", "[transforms]") {
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({16, 3, 32, 32});
  std::mt19937_64 rng_a(MixSeed(7, 0)), rng_b(MixSeed(7, 0)), rng_c(MixSeed(8, 0));
  const torch::Tensor a = AugmentCifar(x, &rng_a);
  REQUIRE(a.sizes() == x.sizes());
  CHECK(torch::equal(a, AugmentCifar(x, &rng_b)));   // same seed, same result
  CHECK(!torch::equal(a, AugmentCifar(x, &rng_c)));  // another seed, another result
  CHECK(!torch::equal(a, AugmentCifar(x, &rng_a)));  // the engine moves on
  const torch::Tensor padded = torch::constant_pad_nd(x, {4, 4, 4, 4}, 0);
  for (int64_t i = 0; i < x.size(0); ++i) {
    INFO("image " << i);
    CHECK(IsCropOrFlippedCrop(padded[i], a[i], 4));
  }
}

TEST_CASE("RandomCropFlip flips about half the images", "[transforms]") {
  torch::manual_seed(2);
  const torch::Tensor x = torch::randn({1000, 1, 4, 4});
  std::mt19937_64 rng(3);
  const torch::Tensor y = RandomCropFlip(x, 0, &rng);  // pad 0: only flips
  int64_t flipped = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    const bool same = torch::equal(y[i], x[i]);
    REQUIRE((same || torch::equal(y[i], x[i].flip({2}))));
    flipped += same ? 0 : 1;
  }
  CHECK(flipped > 430);  // Binomial(1000, 0.5): mean 500, sd 16
  CHECK(flipped < 570);
}

TEST_CASE("the synthetic set is seeded, normalised and learnable", "[synthetic]") {
  const DatasetPair d = LoadDataset("synthetic", "", 0, 0, 11);
  REQUIRE(d.train.images.sizes() == torch::IntArrayRef({kSyntheticTrainDefault, 1, 28, 28}));
  REQUIRE(d.test.images.sizes() == torch::IntArrayRef({kSyntheticTestDefault, 1, 28, 28}));
  CHECK(d.train.labels.min().item<int64_t>() >= 0);
  CHECK(d.train.labels.max().item<int64_t>() < 10);
  CHECK(std::abs(d.train.images.mean().item<double>()) < 0.1);
  CHECK(std::abs(d.train.images.std().item<double>() - 1) < 0.1);
  const DatasetPair again = LoadDataset("synthetic", "", 0, 0, 11);
  CHECK(torch::equal(again.train.images, d.train.images));
  CHECK(torch::equal(again.test.labels, d.test.labels));
  CHECK(!torch::equal(LoadDataset("synthetic", "", 0, 0, 12).train.images, d.train.images));
  CHECK(LoadDataset("synthetic", "", 100, 30, 11).train.size() == 100);
  // Nearest class mean of the training set classifies held-out test examples.
  const torch::Tensor x = d.train.images.flatten(1);
  torch::Tensor means = torch::zeros({10, x.size(1)});
  means.index_add_(0, d.train.labels, x);
  means /= torch::bincount(d.train.labels, {}, 10).unsqueeze(1).to(torch::kFloat32);
  const torch::Tensor pred = torch::cdist(d.test.images.flatten(1), means).argmin(1);
  const double accuracy = pred.eq(d.test.labels).to(torch::kFloat64).mean().item<double>();
  INFO("nearest-mean test accuracy " << accuracy);
  CHECK(accuracy > 0.9);
}

}  // namespace
}  // namespace gradpress::worker::data
