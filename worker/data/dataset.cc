#include "worker/data/dataset.h"

#include <algorithm>

#include "common/error.h"
#include "worker/data/cifar.h"
#include "worker/data/idx.h"
#include "worker/data/synthetic.h"
#include "worker/data/transforms.h"

namespace gradpress::worker::data {
namespace {

std::string JoinNames() {
  std::string s;
  for (const std::string& n : DatasetNames()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

int64_t Keep(int64_t subset, int64_t available) {
  return subset == 0 ? available : std::min(subset, available);
}

}  // namespace

const std::vector<std::string>& DatasetNames() {
  static const std::vector<std::string> names = {"fashion-mnist", "mnist", "cifar10", "synthetic"};
  return names;
}

Normalization StandardNormalization(const std::string& name) {
  if (name == "mnist") return {{0.1307}, {0.3081}};
  if (name == "fashion-mnist") return {{0.2860}, {0.3530}};
  if (name == "cifar10") return {{0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616}};
  GP_ENFORCE(false, "no standard normalisation for dataset '", name, "'; known: mnist, ",
             "fashion-mnist, cifar10");
  return {};
}

Dataset Prepare(const RawSplit& raw, int64_t subset, const Normalization& norm) {
  GP_ENFORCE(subset >= 0, "subset ", subset, " must not be negative (0 keeps everything)");
  const int64_t n = Keep(subset, raw.labels.size(0));
  return {NormalizeImages(raw.images.narrow(0, 0, n), norm.mean, norm.std),
          raw.labels.narrow(0, 0, n).contiguous()};
}

DatasetPair LoadDataset(const std::string& name, const std::string& path, int64_t subset,
                        int64_t test_subset, uint64_t seed) {
  GP_ENFORCE(subset >= 0 && test_subset >= 0, "dataset '", name, "': subset ", subset,
             " and test_subset ", test_subset, " must not be negative (0 keeps everything)");
  DatasetPair out;
  if (name == "synthetic") {
    return MakeSynthetic(subset > 0 ? subset : kSyntheticTrainDefault,
                         test_subset > 0 ? test_subset : kSyntheticTestDefault, seed);
  } else if (name == "mnist" || name == "fashion-mnist") {
    const Normalization norm = StandardNormalization(name);
    out.train = Prepare(ReadIdxSplit(path, "train", 28, 28), subset, norm);
    out.test = Prepare(ReadIdxSplit(path, "t10k", 28, 28), test_subset, norm);
  } else if (name == "cifar10") {
    const Normalization norm = StandardNormalization(name);
    const std::vector<std::string> train_files = CifarTrainFiles(path);
    const std::string test_file = CifarTestFile(path);
    out.train = Prepare(ReadCifarFiles(train_files), subset, norm);
    out.test = Prepare(ReadCifarBatch(test_file), test_subset, norm);
  } else {
    GP_ENFORCE(false, "unknown dataset '", name, "'; known: ", JoinNames());
  }
  GP_ENFORCE(out.train.size() > 0 && out.test.size() > 0, "dataset '", name, "' in ", path, " has ",
             out.train.size(), " training and ", out.test.size(),
             " test examples; expected both positive");
  return out;
}

}  // namespace gradpress::worker::data
