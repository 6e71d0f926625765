#pragma once
// IDX files for the data tests (the MNIST / Fashion-MNIST format): headers, images and labels
// with known values (IdxPixel, IdxLabel), and a whole train/t10k set, raw or gzip.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/worker/data/test_util.h"

namespace gradpress::worker::data::testing {

inline std::string IdxHeader(uint32_t magic, const std::vector<uint32_t>& dims) {
  std::string s;
  auto put = [&s](uint32_t v) {
    for (int shift = 24; shift >= 0; shift -= 8) s.push_back(static_cast<char>(v >> shift));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  return s;
}

// The pixel the generated IDX files hold at image i, row r, column c.
inline uint8_t IdxPixel(int64_t i, int64_t r, int64_t c) {
  return static_cast<uint8_t>((i * 37 + r * 11 + c * 3) % 256);
}
inline uint8_t IdxLabel(int64_t i) { return static_cast<uint8_t>((i * 3 + 1) % 10); }

// A complete IDX images file of n images of rows x cols (IdxPixel values).
inline std::string IdxImages(uint32_t n, uint32_t rows = 28, uint32_t cols = 28) {
  std::string s = IdxHeader(0x803, {n, rows, cols});
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t r = 0; r < rows; ++r)
      for (uint32_t c = 0; c < cols; ++c) s.push_back(static_cast<char>(IdxPixel(i, r, c)));
  return s;
}

inline std::string IdxLabels(uint32_t n) {
  std::string s = IdxHeader(0x801, {n});
  for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(IdxLabel(i)));
  return s;
}

// Writes train-{images,labels} with n_train and t10k-* with n_test examples into dir, each
// file raw or (gz) gzip; returns the train images path.
inline std::string WriteIdxSet(const std::string& dir, uint32_t n_train, uint32_t n_test, bool gz) {
  const std::string ext = gz ? ".gz" : "";
  auto file = [&](const std::string& name) {
    return (std::filesystem::path(dir) / (name + ext)).string();
  };
  WriteMaybeGz(file("train-images-idx3-ubyte"), IdxImages(n_train));
  WriteMaybeGz(file("train-labels-idx1-ubyte"), IdxLabels(n_train));
  WriteMaybeGz(file("t10k-images-idx3-ubyte"), IdxImages(n_test));
  WriteMaybeGz(file("t10k-labels-idx1-ubyte"), IdxLabels(n_test));
  return file("train-images-idx3-ubyte");
}

}  // namespace gradpress::worker::data::testing
