#pragma once
// Reader for the CIFAR-10 binary version (Krizhevsky 2009, cifar-10-binary.tar.gz).
//
//   RawSplit train = ReadCifarFiles(CifarTrainFiles(dir));  // uint8 [50000, 3, 32, 32]
//   RawSplit test = ReadCifarFiles({CifarTestFile(dir)});   // uint8 [10000, 3, 32, 32]
//
// Format: records of kCifarRecordBytes = 3073 bytes, no header: one label byte (0..9), then
// the 1024 red, the 1024 green and the 1024 blue pixels, each plane row-major 32x32. The
// record count of a file is its size / 3073 (any count, so test files may be small).
// Files live in `dir` or in `dir/cifar-10-batches-bin` (the folder the archive unpacks to):
// data_batch_1.bin .. data_batch_5.bin for training, test_batch.bin for testing.
//
// Errors (gradpress::InvalidArgument, naming the file): a missing file (the first missing
// training batch is named), a size that is not a positive multiple of 3073, a label not below
// 10, a read error. Thread-safety: pure functions.
#include <cstdint>
#include <string>
#include <vector>

#include "worker/data/dataset.h"

namespace gradpress::worker::data {

inline constexpr int64_t kCifarImageBytes = 3 * 32 * 32;
inline constexpr int64_t kCifarRecordBytes = 1 + kCifarImageBytes;

// The five training batch paths, in order; throws naming the first one that is missing.
std::vector<std::string> CifarTrainFiles(const std::string& dir);
// The test batch path; throws if it is missing.
std::string CifarTestFile(const std::string& dir);

// One file: images uint8 [N, 3, 32, 32] (channels R, G, B), labels int64 [N].
RawSplit ReadCifarBatch(const std::string& file);
// Several files concatenated in order.
RawSplit ReadCifarFiles(const std::vector<std::string>& files);

}  // namespace gradpress::worker::data
