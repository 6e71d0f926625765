#pragma once
// Datasets as whole in-memory tensors, and the one entry point that loads them by name.
//
//   DatasetPair d = LoadDataset("fashion-mnist", "/usr/share/datasets/fashion-mnist",
//                               /*subset=*/0, /*test_subset=*/0, /*seed=*/42);
//   d.train.images;  // float32 [60000, 1, 28, 28], normalised; d.train.labels int64 [60000]
//
// Names and files (path is a folder):
//   fashion-mnist, mnist  IDX files train-images-idx3-ubyte, train-labels-idx1-ubyte,
//                         t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each raw or with
//                         `.gz` (the raw file is preferred when both exist); 28x28 images, any
//                         count. See worker/data/idx.h.
//   cifar10               CIFAR-10 binary: data_batch_1.bin .. data_batch_5.bin (train) and
//                         test_batch.bin, in path or in path/cifar-10-batches-bin. See cifar.h.
//   synthetic             generated from seed, path ignored. See synthetic.h.
// Pixels become float (x / 255 - mean[c]) / std[c] with the dataset's standard statistics
// (StandardNormalization). subset > 0 keeps the first `subset` training examples, test_subset
// the first test examples (deterministic; a value above the count keeps them all); 0 keeps all
// (synthetic: 0 means 2048 train and 512 test examples).
//
// Errors: gradpress::InvalidArgument naming the file and what was expected (missing file,
// truncated file, wrong magic or size, image/label count mismatch, label not below 10), or the
// known names for an unknown dataset name.
// Thread-safety: pure functions; a Dataset is a value (tensors are shared, not copied, on copy).
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace gradpress::worker::data {

inline constexpr int64_t kNumClasses = 10;  // every supported dataset has 10 classes

struct Dataset {
  torch::Tensor images;  // float32 [N, C, H, W], normalised, contiguous
  torch::Tensor labels;  // int64 [N], each in [0, kNumClasses)
  int64_t size() const { return labels.defined() ? labels.size(0) : 0; }
};

struct DatasetPair {
  Dataset train, test;
};

// Images as stored: uint8 [N, C, H, W] and int64 labels [N]; what the file readers return.
struct RawSplit {
  torch::Tensor images;
  torch::Tensor labels;
};

// Per-channel mean and standard deviation of pixel / 255 over the training set.
struct Normalization {
  std::vector<double> mean, std;
};

// The standard statistics: mnist 0.1307/0.3081, fashion-mnist 0.2860/0.3530, cifar10
// (0.4914, 0.4822, 0.4465)/(0.2470, 0.2435, 0.2616). Throws InvalidArgument for other names.
Normalization StandardNormalization(const std::string& name);

// "fashion-mnist", "mnist", "cifar10", "synthetic".
const std::vector<std::string>& DatasetNames();

DatasetPair LoadDataset(const std::string& name, const std::string& path, int64_t subset,
                        int64_t test_subset, uint64_t seed);

// Keeps the first `subset` examples of raw (all when subset is 0 or above the count) and
// normalises them. Throws InvalidArgument for a negative subset or a channel-count mismatch.
Dataset Prepare(const RawSplit& raw, int64_t subset, const Normalization& norm);

}  // namespace gradpress::worker::data
