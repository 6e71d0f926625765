#pragma once
// Helpers for the data tests: a self-removing temp folder and writers of IDX (raw and gzip)
// and CIFAR-10 binary files in the exact on-disk formats.
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/error.h"

namespace gradpress::worker::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gp_data_XXXXXX").string();
    GP_ENFORCE(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed for ", tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  GP_ENFORCE(out.good(), "cannot write ", path);
}

inline void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  GP_ENFORCE(gz != nullptr, "cannot open ", path);
  const int wrote = bytes.empty() ? 0 : gzwrite(gz, bytes.data(), bytes.size());
  GP_ENFORCE(wrote == static_cast<int>(bytes.size()), "gzwrite failed for ", path);
  GP_ENFORCE(gzclose(gz) == Z_OK, "gzclose failed for ", path);
}

// Raw when the path has no ".gz" suffix, gzip otherwise.
inline void WriteMaybeGz(const std::string& path, const std::string& bytes) {
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  gz ? WriteGz(path, bytes) : WriteFile(path, bytes);
}

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

// CIFAR-10 record i of a file whose records start at global index `first`: label
// CifarLabel(first + i), then planes R, G, B with CifarPixel values.
inline uint8_t CifarPixel(int64_t i, int64_t ch, int64_t r, int64_t c) {
  return static_cast<uint8_t>((i * 13 + ch * 80 + r * 5 + c) % 256);
}
inline uint8_t CifarLabel(int64_t i) { return static_cast<uint8_t>((i * 7 + 2) % 10); }

inline std::string CifarRecords(int64_t first, int64_t n) {
  std::string s;
  for (int64_t i = first; i < first + n; ++i) {
    s.push_back(static_cast<char>(CifarLabel(i)));
    for (int ch = 0; ch < 3; ++ch)
      for (int r = 0; r < 32; ++r)
        for (int c = 0; c < 32; ++c) s.push_back(static_cast<char>(CifarPixel(i, ch, r, c)));
  }
  return s;
}

// Record counts of the generated data_batch_1..5.bin and test_batch.bin.
inline const std::vector<int64_t>& CifarTrainCounts() {
  static const std::vector<int64_t> counts = {2, 3, 1, 2, 2};
  return counts;
}
inline constexpr int64_t kCifarTestCount = 3;

// Writes the six CIFAR files into dir; train record indices run on across the batches.
inline void WriteCifarSet(const std::string& dir) {
  int64_t first = 0;
  for (size_t b = 0; b < CifarTrainCounts().size(); ++b) {
    const std::string name = "data_batch_" + std::to_string(b + 1) + ".bin";
    WriteFile((std::filesystem::path(dir) / name).string(),
              CifarRecords(first, CifarTrainCounts()[b]));
    first += CifarTrainCounts()[b];
  }
  WriteFile((std::filesystem::path(dir) / "test_batch.bin").string(),
            CifarRecords(1000, kCifarTestCount));
}

// The message of the InvalidArgument that f throws, or a marker when it throws none.
template <typename F>
std::string InvalidArgumentMessage(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "<no InvalidArgument thrown>";
}

}  // namespace gradpress::worker::data::testing
