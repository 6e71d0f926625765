#pragma once
// CIFAR-10 binary files for the data tests: records with known values (CifarPixel,
// CifarLabel) and the six batch files of a generated set.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/worker/data/test_util.h"

namespace gradpress::worker::data::testing {

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

}  // namespace gradpress::worker::data::testing
