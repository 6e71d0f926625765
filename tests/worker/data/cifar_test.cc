// CIFAR-10 binary loading through LoadDataset on generated batch files, and its validation.
#include "worker/data/cifar.h"

#include <filesystem>

#include "tests/catch_torch.h"
#include "tests/worker/data/cifar_files.h"
#include "tests/worker/data/test_util.h"
#include "worker/data/dataset.h"

namespace gradpress::worker::data {
namespace {

using Catch::Matchers::Contains;
using testing::CifarLabel;
using testing::CifarPixel;
using testing::CifarRecords;
using testing::CifarTrainCounts;
using testing::InvalidArgumentMessage;
using testing::kCifarTestCount;
using testing::TempDir;
using testing::WriteCifarSet;
using testing::WriteFile;

const double kMean[3] = {0.4914, 0.4822, 0.4465};
const double kStd[3] = {0.2470, 0.2435, 0.2616};

// Every pixel and label of d against records first .. first + n of the generator.
void CheckCifarSplit(const Dataset& d, int64_t first, int64_t n) {
  REQUIRE(d.images.sizes() == torch::IntArrayRef({n, 3, 32, 32}));
  REQUIRE(d.labels.sizes() == torch::IntArrayRef({n}));
  torch::Tensor want = torch::empty({n, 3, 32, 32});
  torch::Tensor want_labels = torch::empty({n}, torch::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    want_labels[i] = CifarLabel(first + i);
    for (int64_t ch = 0; ch < 3; ++ch)
      for (int64_t r = 0; r < 32; ++r)
        for (int64_t c = 0; c < 32; ++c)
          want[i][ch][r][c] = (CifarPixel(first + i, ch, r, c) / 255.0 - kMean[ch]) / kStd[ch];
  }
  CHECK(torch::allclose(d.images, want, 1e-5, 1e-5));
  CHECK(torch::equal(d.labels, want_labels));
}

int64_t TrainTotal() {
  int64_t n = 0;
  for (int64_t c : CifarTrainCounts()) n += c;
  return n;
}

TEST_CASE("CIFAR-10 batches load as [N, 3, 32, 32] R, G, B planes with labels", "[cifar]") {
  TempDir dir;
  WriteCifarSet(dir.path());
  const DatasetPair d = LoadDataset("cifar10", dir.path(), 0, 0, 0);
  CheckCifarSplit(d.train, 0, TrainTotal());
  CheckCifarSplit(d.test, 1000, kCifarTestCount);
  // The first 1024 image bytes are the red plane: record 0, channel 0, pixel (0, 1).
  const RawSplit raw = ReadCifarBatch(dir / "data_batch_1.bin");
  CHECK(raw.images[0][0][0][1].item<int>() == CifarPixel(0, 0, 0, 1));
  CHECK(raw.images[1][2][31][31].item<int>() == CifarPixel(1, 2, 31, 31));
}

TEST_CASE("CIFAR-10 loads from the archive's cifar-10-batches-bin folder, with subsets",
          "[cifar]") {
  TempDir dir;
  std::filesystem::create_directory(dir / "cifar-10-batches-bin");
  WriteCifarSet(dir / "cifar-10-batches-bin");
  const DatasetPair d = LoadDataset("cifar10", dir.path(), 4, 1, 0);
  CheckCifarSplit(d.train, 0, 4);
  CheckCifarSplit(d.test, 1000, 1);
}

TEST_CASE("CIFAR-10 errors name the file and what was expected", "[cifar]") {
  TempDir dir;
  WriteCifarSet(dir.path());
  auto load = [&] { LoadDataset("cifar10", dir.path(), 0, 0, 0); };
  SECTION("a truncated batch") {
    WriteFile(dir / "data_batch_3.bin", CifarRecords(0, 2).substr(0, 2 * 3073 - 5));
    CHECK_THAT(InvalidArgumentMessage(load),
               Contains(dir / "data_batch_3.bin" +
                        ": size 6141 bytes is not a positive multiple of 3073"));
  }
  SECTION("an empty batch") {
    WriteFile(dir / "test_batch.bin", "");
    CHECK_THAT(InvalidArgumentMessage(load),
               Contains(dir / "test_batch.bin" + ": size 0 bytes is not a positive multiple"));
  }
  SECTION("a missing training batch is named") {
    std::filesystem::remove(dir / "data_batch_4.bin");
    CHECK_THAT(InvalidArgumentMessage(load),
               Contains(dir / "data_batch_4.bin" + ": missing; CIFAR-10 binary needs"));
  }
  SECTION("a missing test batch is named") {
    std::filesystem::remove(dir / "test_batch.bin");
    CHECK_THAT(InvalidArgumentMessage(load), Contains(dir / "test_batch.bin" + ": missing"));
  }
  SECTION("a label not below 10") {
    std::string bytes = CifarRecords(0, 3);
    bytes[2 * 3073] = 10;
    WriteFile(dir / "data_batch_5.bin", bytes);
    CHECK_THAT(InvalidArgumentMessage(load),
               Contains(dir / "data_batch_5.bin" + ": label 10 of record 2"));
  }
  SECTION("a foreign file whose size happens to fit") {
    std::string bytes(3073, '\xff');
    WriteFile(dir / "data_batch_1.bin", bytes);
    CHECK_THAT(InvalidArgumentMessage(load),
               Contains(dir / "data_batch_1.bin" + ": label 255 of record 0"));
  }
  SECTION("an empty folder") {
    TempDir empty;
    CHECK_THAT(InvalidArgumentMessage([&] { LoadDataset("cifar10", empty.path(), 0, 0, 0); }),
               Contains(empty / "data_batch_1.bin" + ": missing"));
  }
}

}  // namespace
}  // namespace gradpress::worker::data
