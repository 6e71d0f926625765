// IDX loading (raw and gzip) through LoadDataset, its validation, and the real Fashion-MNIST.
#include <filesystem>

#include "tests/catch_torch.h"
#include "tests/worker/data/idx_files.h"
#include "tests/worker/data/test_util.h"
#include "worker/data/dataset.h"
#include "worker/data/idx.h"

namespace gradpress::worker::data {
namespace {

using Catch::Matchers::Contains;
using testing::IdxHeader;
using testing::IdxImages;
using testing::IdxLabel;
using testing::IdxLabels;
using testing::IdxPixel;
using testing::InvalidArgumentMessage;
using testing::TempDir;
using testing::WriteFile;
using testing::WriteGz;
using testing::WriteIdxSet;

// Checks every pixel and label of d against the generator, normalised with (mean, std).
void CheckIdxSplit(const Dataset& d, int64_t n, double mean, double std) {
  REQUIRE(d.images.sizes() == torch::IntArrayRef({n, 1, 28, 28}));
  REQUIRE(d.images.dtype() == torch::kFloat32);
  REQUIRE(d.labels.sizes() == torch::IntArrayRef({n}));
  REQUIRE(d.labels.dtype() == torch::kInt64);
  torch::Tensor want = torch::empty({n, 1, 28, 28});
  torch::Tensor want_labels = torch::empty({n}, torch::kInt64);
  for (int64_t i = 0; i < n; ++i) {
    want_labels[i] = IdxLabel(i);
    for (int64_t r = 0; r < 28; ++r)
      for (int64_t c = 0; c < 28; ++c) want[i][0][r][c] = (IdxPixel(i, r, c) / 255.0 - mean) / std;
  }
  CHECK(torch::allclose(d.images, want, 1e-5, 1e-5));
  CHECK(torch::equal(d.labels, want_labels));
}

TEST_CASE("IDX files load raw and gzipped, normalised, with their labels", "[idx]") {
  for (bool gz : {false, true}) {
    INFO("gz=" << gz);
    TempDir dir;
    WriteIdxSet(dir.path(), 7, 3, gz);
    const DatasetPair mnist = LoadDataset("mnist", dir.path(), 0, 0, 0);
    CheckIdxSplit(mnist.train, 7, 0.1307, 0.3081);
    CheckIdxSplit(mnist.test, 3, 0.1307, 0.3081);
    const DatasetPair fashion = LoadDataset("fashion-mnist", dir.path(), 0, 0, 0);
    CheckIdxSplit(fashion.train, 7, 0.2860, 0.3530);
    CHECK(fashion.train.size() == 7);
    CHECK(fashion.test.size() == 3);
  }
}

TEST_CASE("subset keeps the first examples; a larger subset keeps all", "[idx]") {
  TempDir dir;
  WriteIdxSet(dir.path(), 7, 3, true);
  const DatasetPair all = LoadDataset("mnist", dir.path(), 0, 0, 0);
  const DatasetPair some = LoadDataset("mnist", dir.path(), 4, 2, 0);
  CHECK(some.train.size() == 4);
  CHECK(some.test.size() == 2);
  CHECK(torch::equal(some.train.images, all.train.images.narrow(0, 0, 4)));
  CHECK(torch::equal(some.test.labels, all.test.labels.narrow(0, 0, 2)));
  CHECK(LoadDataset("mnist", dir.path(), 100, 100, 0).train.size() == 7);
  CHECK_THAT(InvalidArgumentMessage([&] { LoadDataset("mnist", dir.path(), -1, 0, 0); }),
             Contains("must not be negative"));
}

TEST_CASE("the raw IDX file is preferred when both raw and .gz exist", "[idx]") {
  TempDir dir;
  WriteIdxSet(dir.path(), 5, 2, false);
  WriteIdxSet(dir.path(), 9, 4, true);
  CHECK(ResolveIdxFile(dir.path(), "train-images-idx3-ubyte") == dir / "train-images-idx3-ubyte");
  CHECK(LoadDataset("mnist", dir.path(), 0, 0, 0).train.size() == 5);
  std::filesystem::remove(dir / "train-images-idx3-ubyte");
  CHECK(ResolveIdxFile(dir.path(), "train-images-idx3-ubyte") ==
        dir / "train-images-idx3-ubyte.gz");
}

TEST_CASE("IDX errors name the file and what was expected", "[idx]") {
  for (bool gz : {false, true}) {
    INFO("gz=" << gz);
    TempDir dir;
    const std::string images = WriteIdxSet(dir.path(), 5, 2, gz);
    const std::string ext = gz ? ".gz" : "";
    const std::string labels = dir / ("train-labels-idx1-ubyte" + ext);
    auto write = gz ? WriteGz : WriteFile;
    auto load = [&] { LoadDataset("fashion-mnist", dir.path(), 0, 0, 0); };

    SECTION("truncated data") {
      write(images, IdxImages(5).substr(0, 16 + 123));
      CHECK_THAT(InvalidArgumentMessage(load),
                 Contains(images + ": truncated: header says 5x28x28 = 3920 bytes, file has 123"));
    }
    SECTION("truncated header") {
      write(images, IdxImages(5).substr(0, 10));
      CHECK_THAT(InvalidArgumentMessage(load), Contains(images + ": truncated: the header ends"));
    }
    SECTION("bytes after the data") {
      write(images, IdxImages(5) + "xyz");
      CHECK_THAT(InvalidArgumentMessage(load), Contains(images + ": longer than its header says"));
    }
    SECTION("a labels file where images belong") {
      write(images, IdxLabels(5));
      CHECK_THAT(InvalidArgumentMessage(load),
                 Contains(images + ": not an IDX images file: magic 0x00000801, expected "
                                   "0x00000803"));
    }
    SECTION("an images file where labels belong") {
      write(labels, IdxImages(5));
      CHECK_THAT(InvalidArgumentMessage(load),
                 Contains(labels + ": not an IDX labels file: magic 0x00000803, expected "
                                   "0x00000801"));
    }
    SECTION("a foreign file") {
      write(images, "GIF89a\x01\x02\x03 this is not an IDX file at all");
      CHECK_THAT(InvalidArgumentMessage(load), Contains(images + ": not an IDX images file"));
    }
    SECTION("an empty file") {
      write(images, "");
      CHECK_THAT(InvalidArgumentMessage(load),
                 Contains(images + ": not an IDX images file: 0 bytes"));
    }
    SECTION("image and label counts differ") {
      write(labels, IdxLabels(4));
      const std::string msg = InvalidArgumentMessage(load);
      CHECK_THAT(msg, Contains(images + " has 5 images but " + labels + " has 4 labels"));
    }
    SECTION("a label not below 10") {
      std::string bytes = IdxLabels(5);
      bytes[8 + 3] = 12;
      write(labels, bytes);
      CHECK_THAT(InvalidArgumentMessage(load),
                 Contains(labels + ": label 12 at index 3 is not below 10"));
    }
    SECTION("images of the wrong size") {
      write(images, IdxImages(5, 30, 28));
      CHECK_THAT(InvalidArgumentMessage(load),
                 Contains(images + ": images are 30x28, expected 28x28"));
    }
    SECTION("a header that claims more than int64 holds") {
      write(images, IdxHeader(0x803, {0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF}));
      CHECK_THAT(InvalidArgumentMessage(load), Contains(images + ": header says"));
    }
    SECTION("a missing file names both candidates") {
      std::filesystem::remove(dir / ("t10k-labels-idx1-ubyte" + ext));
      const std::string raw = dir / "t10k-labels-idx1-ubyte";
      CHECK_THAT(InvalidArgumentMessage(load),
                 Contains("neither " + raw + " nor " + raw + ".gz exists"));
    }
  }
}

TEST_CASE("a corrupt or cut gzip stream is an error naming the file", "[idx]") {
  TempDir dir;
  const std::string images = WriteIdxSet(dir.path(), 20, 2, true);
  std::string gz;
  {
    std::ifstream in(images, std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  auto load = [&] { LoadDataset("mnist", dir.path(), 0, 0, 0); };
  SECTION("cut in the middle") {
    WriteFile(images, gz.substr(0, gz.size() / 2));
    CHECK_THAT(InvalidArgumentMessage(load),
               Contains(images + ": corrupt or truncated gzip stream"));
  }
  SECTION("bytes flipped inside the deflate data") {
    for (size_t i = 20; i < gz.size() - 8; i += 7) gz[i] = static_cast<char>(gz[i] ^ 0x5A);
    WriteFile(images, gz);
    CHECK_THAT(InvalidArgumentMessage(load), Contains(images + ": "));
  }
}

TEST_CASE("unknown dataset names list the known ones", "[idx]") {
  CHECK_THAT(InvalidArgumentMessage([] { LoadDataset("imagenet", "/nowhere", 0, 0, 0); }),
             Contains("unknown dataset 'imagenet'; known: fashion-mnist, mnist, cifar10, "
                      "synthetic"));
}

TEST_CASE("the installed Fashion-MNIST loads 60000 + 10000 normalised images", "[idx]") {
  const std::string path = "/usr/share/datasets/fashion-mnist";
  // scripts/setup.sh installs dataset-fashion-mnist: its absence is a failure, not a skip.
  REQUIRE(std::filesystem::exists(path + "/train-images-idx3-ubyte.gz"));
  const DatasetPair d = LoadDataset("fashion-mnist", path, 0, 0, 0);  // about 1 s
  REQUIRE(d.train.images.sizes() == torch::IntArrayRef({60000, 1, 28, 28}));
  REQUIRE(d.test.images.sizes() == torch::IntArrayRef({10000, 1, 28, 28}));
  CHECK(d.train.labels.sizes() == torch::IntArrayRef({60000}));
  // The standard statistics are the training set's: mean 0 and std 1 after normalisation.
  CHECK(std::abs(d.train.images.mean().item<double>()) < 0.01);
  CHECK(std::abs(d.train.images.std().item<double>() - 1.0) < 0.01);
  // Fashion-MNIST is balanced: 6000 training and 1000 test images per class.
  CHECK(torch::equal(torch::bincount(d.train.labels), torch::full({10}, 6000, torch::kInt64)));
  CHECK(torch::equal(torch::bincount(d.test.labels), torch::full({10}, 1000, torch::kInt64)));
}

}  // namespace
}  // namespace gradpress::worker::data
