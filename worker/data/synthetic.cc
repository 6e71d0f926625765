#include "worker/data/synthetic.h"

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include "common/error.h"
#include "worker/data/random.h"

namespace gradpress::worker::data {
namespace {

Dataset Draw(const torch::Tensor& prototypes, int64_t n, uint64_t stream_seed) {
  torch::Generator gen = at::detail::createCPUGenerator(stream_seed);
  torch::Tensor labels = torch::randint(0, kNumClasses, {n}, gen, torch::kInt64);
  torch::Tensor noise = torch::randn({n, 1, 28, 28}, gen, torch::kFloat32);
  torch::Tensor images = (prototypes.index_select(0, labels) * kSyntheticSignal + noise) /
                         std::sqrt(kSyntheticSignal * kSyntheticSignal + 1.0);
  return {images.contiguous(), labels};
}

}  // namespace

DatasetPair MakeSynthetic(int64_t train_size, int64_t test_size, uint64_t seed) {
  GP_ENFORCE(train_size > 0 && test_size > 0, "synthetic dataset: sizes ", train_size, " and ",
             test_size, " must be positive");
  torch::Generator gen = at::detail::createCPUGenerator(MixSeed(seed, 0));
  const torch::Tensor prototypes = torch::randn({kNumClasses, 1, 7, 7}, gen, torch::kFloat32)
                                       .repeat_interleave(4, 2)
                                       .repeat_interleave(4, 3);
  return {Draw(prototypes, train_size, MixSeed(seed, 1)),
          Draw(prototypes, test_size, MixSeed(seed, 2))};
}

}  // namespace gradpress::worker::data
