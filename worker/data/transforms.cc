#include "worker/data/transforms.h"

#include <algorithm>

#include "common/error.h"
#include "worker/data/random.h"

namespace gradpress::worker::data {

torch::Tensor NormalizeImages(const torch::Tensor& images, const std::vector<double>& mean,
                              const std::vector<double>& std) {
  GP_ENFORCE(images.dim() == 4, "NormalizeImages: expected [N, C, H, W], got ", images.dim(),
             " dims");
  const int64_t channels = images.size(1);
  GP_ENFORCE(
      static_cast<int64_t>(mean.size()) == channels && static_cast<int64_t>(std.size()) == channels,
      "NormalizeImages: ", channels, " channels but ", mean.size(), " means and ", std.size(),
      " standard deviations");
  // One fused affine map per channel: x * (1 / (255 std)) - mean / std.
  std::vector<float> scale(channels), shift(channels);
  for (int64_t c = 0; c < channels; ++c) {
    GP_ENFORCE(std[c] > 0, "NormalizeImages: std[", c, "] = ", std[c], " must be positive");
    scale[c] = static_cast<float>(1.0 / (255.0 * std[c]));
    shift[c] = static_cast<float>(-mean[c] / std[c]);
  }
  const torch::Tensor s = torch::tensor(scale).view({1, channels, 1, 1});
  const torch::Tensor b = torch::tensor(shift).view({1, channels, 1, 1});
  return torch::addcmul(b, images.to(torch::kFloat32), s).contiguous();
}

Dataset GatherBatch(const Dataset& data, const std::vector<int64_t>& indices, size_t begin,
                    size_t end) {
  end = std::min(end, indices.size());
  GP_ENFORCE(begin <= end, "GatherBatch: begin ", begin, " is past end ", end);
  const int64_t n = data.size();
  for (size_t i = begin; i < end; ++i) {
    GP_ENFORCE(indices[i] >= 0 && indices[i] < n, "GatherBatch: index ", indices[i],
               " at position ", i, " is outside a dataset of ", n, " examples");
  }
  if (begin == end) return {data.images.narrow(0, 0, 0), data.labels.narrow(0, 0, 0)};
  const torch::Tensor idx = torch::from_blob(const_cast<int64_t*>(indices.data() + begin),
                                             {static_cast<int64_t>(end - begin)}, torch::kInt64);
  return {data.images.index_select(0, idx), data.labels.index_select(0, idx)};
}

torch::Tensor RandomCropFlip(const torch::Tensor& images, int64_t pad, std::mt19937_64* rng) {
  GP_ENFORCE(images.dim() == 4, "RandomCropFlip: expected [B, C, H, W], got ", images.dim(),
             " dims");
  GP_ENFORCE(pad >= 0, "RandomCropFlip: pad ", pad, " must not be negative");
  const int64_t h = images.size(2), w = images.size(3);
  const torch::Tensor padded = torch::constant_pad_nd(images, {pad, pad, pad, pad}, 0);
  torch::Tensor out = torch::empty_like(images, torch::MemoryFormat::Contiguous);
  for (int64_t i = 0; i < images.size(0); ++i) {
    const int64_t dy = static_cast<int64_t>(UniformBelow(rng, 2 * pad + 1));
    const int64_t dx = static_cast<int64_t>(UniformBelow(rng, 2 * pad + 1));
    const bool flip = ((*rng)() >> 63) != 0;
    torch::Tensor crop = padded[i].narrow(1, dy, h).narrow(2, dx, w);
    out[i].copy_(flip ? crop.flip({2}) : crop);
  }
  return out;
}

torch::Tensor AugmentCifar(const torch::Tensor& images, std::mt19937_64* rng) {
  return RandomCropFlip(images, 4, rng);
}

}  // namespace gradpress::worker::data
