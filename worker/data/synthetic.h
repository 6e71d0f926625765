#pragma once
// A learnable synthetic classification set for tests and benchmarks: 10 classes of 1x28x28
// images (the MNIST shape, so LeNet takes it unchanged).
//
//   DatasetPair d = MakeSynthetic(/*train_size=*/2048, /*test_size=*/512, /*seed=*/7);
//
// Each class c has a prototype P_c: standard normal noise on a 7x7 grid, upsampled 4x by
// repetition, so it is smooth enough to survive pooling. An example of class c is
// (kSyntheticSignal * P_c + N(0, 1) noise) / sqrt(kSyntheticSignal^2 + 1), roughly zero mean
// and unit variance, i.e. already normalised. Two prototypes differ by about
// kSyntheticSignal * sqrt(2 * 784) noise standard deviations, so a small network separates
// the classes within an epoch. Labels are uniform in [0, 10). Prototypes, train and test come
// from three independent streams of `seed` (torch's CPU generator): the same seed gives the
// same tensors on every rank and run, and test examples are fresh draws.
// Thread-safety: pure function.
#include <cstdint>

#include "worker/data/dataset.h"

namespace gradpress::worker::data {

inline constexpr double kSyntheticSignal = 0.5;
inline constexpr int64_t kSyntheticTrainDefault = 2048;
inline constexpr int64_t kSyntheticTestDefault = 512;

// Throws InvalidArgument unless both sizes are positive.
DatasetPair MakeSynthetic(int64_t train_size, int64_t test_size, uint64_t seed);

}  // namespace gradpress::worker::data
