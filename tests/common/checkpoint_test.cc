#include "common/checkpoint.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>

#include "common/error.h"
#include "tests/temp_dir.h"

namespace gradpress {
namespace {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed at the end of the test.
using testing::TempDir;

Checkpoint Make(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.Put("meta", "step " + std::to_string(step));
  std::vector<float> w(1000);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f + step;
  c.Put("key/w", FloatBytes(w.data(), w.size()));
  c.Put("empty", "");
  return c;
}

void Corrupt(const std::string& path, size_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char b = 0;
  f.read(&b, 1);
  f.seekp(static_cast<std::streamoff>(offset));
  b = static_cast<char>(b ^ 0x10);
  f.write(&b, 1);
}

TEST_CASE("a checkpoint round-trips its sections and step", "[checkpoint]") {
  TempDir d;
  const std::string path = SaveCheckpoint(d.path, Make(40));
  CHECK(fs::path(path).filename() == "step-000000000040.ckpt");
  Checkpoint c = ReadCheckpoint(path);
  CHECK(c.step == 40);
  CHECK(c.sections == Make(40).sections);
  CHECK(BytesToFloats(c.Get("key/w"), "w")[3] == 41.5f);
  CHECK_THROWS_AS(c.Get("nope"), InvalidArgument);
  CHECK(!fs::exists(path + ".tmp"));
}

TEST_CASE("latest names the newest checkpoint and old ones are pruned", "[checkpoint]") {
  TempDir d;
  for (int64_t s : {10, 20, 30, 40}) SaveCheckpoint(d.path, Make(s), /*keep=*/2);
  const auto all = ListCheckpoints(d.path);
  REQUIRE(all.size() == 2);
  CHECK(all[0].first == 40);
  CHECK(all[1].first == 30);
  std::ifstream latest(fs::path(d.path) / "latest");
  std::string name;
  std::getline(latest, name);
  CHECK(name == "step-000000000040.ckpt");
  auto c = LoadLatestCheckpoint(d.path);
  REQUIRE(c.has_value());
  CHECK(c->step == 40);
  auto older = LoadLatestCheckpoint(d.path, [](int64_t s) { return s < 40; });
  REQUIRE(older.has_value());
  CHECK(older->step == 30);
  CHECK(!LoadLatestCheckpoint(d.path, [](int64_t s) { return s == 5; }).has_value());
  CHECK(!LoadLatestCheckpoint(d.path + "/missing").has_value());
}

TEST_CASE("a corrupt or truncated newest checkpoint falls back to the previous one",
          "[checkpoint]") {
  TempDir d;
  SaveCheckpoint(d.path, Make(10));
  const std::string newest = SaveCheckpoint(d.path, Make(20));
  SECTION("a flipped bit fails the CRC") {
    Corrupt(newest, 100);
    CHECK_THROWS_WITH(ReadCheckpoint(newest), Catch::Contains("CRC mismatch"));
  }
  SECTION("a truncated file") {
    fs::resize_file(newest, fs::file_size(newest) / 2);
    CHECK_THROWS_AS(ReadCheckpoint(newest), InvalidArgument);
  }
  SECTION("a foreign file") {
    std::ofstream(newest, std::ios::trunc) << "this is not a checkpoint at all, not at all";
    CHECK_THROWS_WITH(ReadCheckpoint(newest), Catch::Contains("magic"));
  }
  auto c = LoadLatestCheckpoint(d.path);
  REQUIRE(c.has_value());
  CHECK(c->step == 10);
  CHECK(c->Get("meta") == "step 10");
}

TEST_CASE("a checkpoint that cannot be written is an Unavailable error naming the path",
          "[checkpoint]") {
  TempDir d;
  fs::create_directories(d.path);
  std::ofstream(fs::path(d.path) / "file") << "x";  // a file where the directory should be
  CHECK_THROWS_AS(SaveCheckpoint(d.path + "/file/sub", Make(1)), Unavailable);
}

}  // namespace
}  // namespace gradpress
