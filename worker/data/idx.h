#pragma once
// Reader for IDX files (the MNIST / Fashion-MNIST format, LeCun et al.), raw or gzip.
//
//   std::string f = ResolveIdxFile(dir, "train-images-idx3-ubyte");  // raw or .gz
//   torch::Tensor images = ReadIdxImages(f);                         // uint8 [N, H, W]
//   RawSplit s = ReadIdxSplit(dir, "train", 28, 28);                 // [N, 1, 28, 28] + labels
//
// Format: a big-endian uint32 magic 0x00000803 (unsigned bytes, 3 dims) for images or
// 0x00000801 (1 dim) for labels, one big-endian uint32 per dim (count, then rows and cols for
// images), then exactly count x rows x cols bytes, row-major. Files are read through zlib, so a
// gzip file and a plain one (in zlib's transparent mode) both work whatever their name.
//
// Every check names the file and the expectation, with gradpress::InvalidArgument: a file that
// cannot be opened, a corrupt or truncated gzip stream, a wrong magic (a foreign file), a
// zero-sized image dim, a data length other than the header's product ("truncated: header says
// 60000x28x28 = 47040000 bytes, file has 123"), bytes after the data, a label not below
// num_classes, and (ReadIdxSplit) image and label counts that differ or unexpected rows/cols.
// Memory: the bytes read, bounded by the file's real size, never by what a header claims.
// Thread-safety: pure functions.
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "worker/data/dataset.h"

namespace gradpress::worker::data {

inline constexpr uint32_t kIdxImagesMagic = 0x00000803;
inline constexpr uint32_t kIdxLabelsMagic = 0x00000801;

// `dir/stem` if it is a file, else `dir/stem.gz` if that is; throws InvalidArgument naming
// both candidates when neither exists.
std::string ResolveIdxFile(const std::string& dir, const std::string& stem);

// uint8 [count, rows, cols].
torch::Tensor ReadIdxImages(const std::string& file);

// int64 [count], each checked below num_classes.
torch::Tensor ReadIdxLabels(const std::string& file, int64_t num_classes = kNumClasses);

// Reads `<dir>/<prefix>-images-idx3-ubyte[.gz]` and `<dir>/<prefix>-labels-idx1-ubyte[.gz]`
// (prefix "train" or "t10k"), checks equal counts and rows x cols, and returns images as
// uint8 [N, 1, rows, cols] with int64 labels [N].
RawSplit ReadIdxSplit(const std::string& dir, const std::string& prefix, int64_t rows,
                      int64_t cols);

}  // namespace gradpress::worker::data
