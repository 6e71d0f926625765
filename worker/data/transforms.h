#pragma once
// Per-batch work on in-memory datasets: normalisation, gathering a batch by index, and the
// standard CIFAR augmentation (random 32x32 crop of the 4-pixel zero-padded image, then a
// horizontal flip with probability 0.5; He et al. 2016, section 4.2).
//
//   std::mt19937_64 rng(MixSeed(seed, rank));                  // one engine per worker
//   Dataset batch = GatherBatch(train, indices, begin, begin + 64);
//   torch::Tensor x = AugmentCifar(batch.images, &rng);        // same shape, new tensor
//
// Augmentation draws, per image in batch order: the crop's row offset and column offset (each
// uniform in [0, 2 pad]), then one flip bit, from rng only, so a seed fixes the result. The
// padding is zeros in the tensor's own space: on normalised images that is the channel mean.
// Thread-safety: pure functions apart from advancing rng (one engine per thread).
#include <torch/types.h>

#include <cstdint>
#include <random>
#include <vector>

#include "worker/data/dataset.h"

namespace gradpress::worker::data {

// uint8 [N, C, H, W] -> float32 (x / 255 - mean[c]) / std[c]; mean and std have C entries.
torch::Tensor NormalizeImages(const torch::Tensor& images, const std::vector<double>& mean,
                              const std::vector<double>& std);

// The examples at indices[begin, end) (end clamped to indices.size()), in that order: images
// [B, C, H, W] and labels [B], fresh contiguous tensors. Throws InvalidArgument for an index
// outside [0, data.size()) or begin > end.
Dataset GatherBatch(const Dataset& data, const std::vector<int64_t>& indices, size_t begin,
                    size_t end);

// Random crop of the `pad`-zero-padded image back to H x W, then a flip of the last dim with
// probability 0.5, independently per image. images: float [B, C, H, W]; pad >= 0.
torch::Tensor RandomCropFlip(const torch::Tensor& images, int64_t pad, std::mt19937_64* rng);

// RandomCropFlip with pad 4, for [B, 3, 32, 32] CIFAR batches.
torch::Tensor AugmentCifar(const torch::Tensor& images, std::mt19937_64* rng);

}  // namespace gradpress::worker::data
