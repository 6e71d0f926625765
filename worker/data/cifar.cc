#include "worker/data/cifar.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/error.h"

namespace gradpress::worker::data {
namespace {

namespace fs = std::filesystem;

bool IsFile(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// The folder holding the batches: dir itself, or dir/cifar-10-batches-bin when only that one
// has data_batch_1.bin or test_batch.bin.
fs::path BatchDir(const std::string& dir) {
  const fs::path base(dir);
  const fs::path nested = base / "cifar-10-batches-bin";
  for (const char* probe : {"data_batch_1.bin", "test_batch.bin"}) {
    if (IsFile(base / probe)) return base;
  }
  for (const char* probe : {"data_batch_1.bin", "test_batch.bin"}) {
    if (IsFile(nested / probe)) return nested;
  }
  return base;
}

std::string Required(const fs::path& file) {
  GP_ENFORCE(IsFile(file), file.string(),
             ": missing; CIFAR-10 binary needs data_batch_1.bin .. data_batch_5.bin and "
             "test_batch.bin in ",
             file.parent_path().string());
  return file.string();
}

}  // namespace

std::vector<std::string> CifarTrainFiles(const std::string& dir) {
  const fs::path base = BatchDir(dir);
  std::vector<std::string> files;
  for (int i = 1; i <= 5; ++i) {
    files.push_back(Required(base / ("data_batch_" + std::to_string(i) + ".bin")));
  }
  return files;
}

std::string CifarTestFile(const std::string& dir) {
  return Required(BatchDir(dir) / "test_batch.bin");
}

RawSplit ReadCifarBatch(const std::string& file) {
  std::error_code ec;
  const uintmax_t size = fs::file_size(file, ec);
  GP_ENFORCE(!ec, file, ": cannot read: ", ec.message());
  GP_ENFORCE(size > 0 && size % kCifarRecordBytes == 0, file, ": size ", size,
             " bytes is not a positive multiple of ", kCifarRecordBytes,
             " (one label byte + 3x32x32 pixels per record); truncated or not a CIFAR-10 batch");
  const int64_t n = static_cast<int64_t>(size / kCifarRecordBytes);
  torch::Tensor records = torch::empty({n, kCifarRecordBytes}, torch::kUInt8);
  std::ifstream in(file, std::ios::binary);
  GP_ENFORCE(in.good(), file, ": cannot open: ", std::strerror(errno));
  in.read(reinterpret_cast<char*>(records.data_ptr<uint8_t>()), static_cast<std::streamsize>(size));
  GP_ENFORCE(static_cast<uintmax_t>(in.gcount()) == size, file, ": read ", in.gcount(), " of ",
             size, " bytes");
  const uint8_t* p = records.data_ptr<uint8_t>();
  for (int64_t i = 0; i < n; ++i) {
    const int label = p[i * kCifarRecordBytes];
    GP_ENFORCE(label < kNumClasses, file, ": label ", label, " of record ", i, " (byte offset ",
               i * kCifarRecordBytes, ") is not below ", kNumClasses, "; not a CIFAR-10 batch");
  }
  torch::Tensor labels = records.select(1, 0).to(torch::kInt64);
  torch::Tensor images = records.narrow(1, 1, kCifarImageBytes).reshape({n, 3, 32, 32}).clone();
  return {images, labels};
}

RawSplit ReadCifarFiles(const std::vector<std::string>& files) {
  GP_ENFORCE(!files.empty(), "ReadCifarFiles: no files given");
  std::vector<torch::Tensor> images, labels;
  for (const std::string& f : files) {
    RawSplit s = ReadCifarBatch(f);
    images.push_back(s.images);
    labels.push_back(s.labels);
  }
  if (files.size() == 1) return {images[0], labels[0]};
  return {torch::cat(images), torch::cat(labels)};
}

}  // namespace gradpress::worker::data
