// The device sparsifiers and MakeDeviceSparsifier (device_parts.h). Each class reads its
// parameters as the CPU constructor does (same names, defaults, ranges and order) and runs the
// CPU's Select on the device: topk and dgc draw the CPU's threshold sample from the same Rng
// and follow the same retry rules, so their payloads and Rng states match the CPU's;
// threshold filters with the same bounds; gaussiank's mean and std come from a device
// reduction (possibly last-bit different from the CPU's, hence bounds and selection near
// the edge); randomk regenerates StratifiedIndices.
// The payload, decoding and state layout live in DeviceSparsifier (sparse_codec.cu).
#include <algorithm>
#include <cmath>
#include <limits>

#include "common/error.h"
#include "compressors/cuda/sparse_codec.h"
#include "compressors/rng.h"
#include "compressors/selection.h"

namespace gradpress::compressors::cuda {
namespace {

constexpr int64_t kSlack = 4096;  // survivor buffer headroom over the expected count

// A survivor buffer size for an expected fraction of n (Compact grows it when exceeded).
int64_t Expect(double fraction, int64_t n) {
  const double want = 1.5 * fraction * static_cast<double>(n) + static_cast<double>(kSlack);
  return std::min<int64_t>(n, static_cast<int64_t>(std::min(want, 9.0e18)));
}

class DeviceTopK : public DeviceSparsifier {
 public:
  DeviceTopK(ParamReader& r, std::unique_ptr<DeviceQuantizer> then)
      : DeviceSparsifier("topk", ReadIndexCoding(r), std::move(then)),
        ratio_(r.Double("ratio", 0.01, 0.0, 1.0)),
        k_(r.Int("k", 0, 0, std::numeric_limits<int32_t>::max())),
        rng_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))) {
    GP_ENFORCE(!(r.Has("k") && r.Has("ratio")), "topk: give either ratio or k, not both");
    AllowSpeculation();
  }
  bool SetDensity(double ratio) override {
    GP_ENFORCE(ratio > 0 && ratio <= 1, "topk: density ", ratio, " is not in (0, 1]");
    ratio_ = ratio;
    k_ = 0;
    return true;
  }

 protected:
  // SelectTopK (topk.cc), step for step.
  int64_t KnownK(int64_t n) const override { return k_ ? std::min(k_, n) : KFromRatio(ratio_, n); }
  Kept Select(const float* in, int64_t n, const StepContext&, Stream stream) override {
    const int64_t k = KnownK(n);
    if (k <= 0 || n <= 0) return Kept{};
    const int64_t sample = std::max<int64_t>(8192, n / 200);
    const double ratio = static_cast<double>(k) / static_cast<double>(n);
    double aim = std::min(1.0, ratio * 1.3 + 64.0 / static_cast<double>(std::min(n, sample)));
    if (speculate()) {  // the first attempt below, assumed to keep >= k (Encode checks)
      selector_.SampleBounds(in, n, aim, sample, &rng_, stream);
      return selector_.SpeculateLargest(in, n, Expect(aim, n), k, stream);
    }
    for (int attempt = 0;; ++attempt) {
      if (attempt < 3)
        selector_.SampleBounds(in, n, aim, sample, &rng_, stream);
      else
        selector_.SetBounds(-0.f, 0.f, 0.f, stream);
      float t = 0.f;
      const int64_t count = selector_.Compact(in, n, Expect(aim, n), &t, stream);
      if (count >= k || t == 0.f) break;
      aim = std::min(1.0, aim * 4.0);
    }
    return selector_.KeepLargest(k, stream);
  }
  void SaveOwnState(std::string* out) const override { SaveRngState(rng_, out); }
  void LoadOwnState(std::string_view in) override { LoadRngState(in, "topk", &rng_); }

 private:
  double ratio_;
  int64_t k_;  // 0: use ratio_
  Rng rng_;
};

class DeviceDgc : public DeviceSparsifier {
 public:
  DeviceDgc(ParamReader& r, std::unique_ptr<DeviceQuantizer> then)
      : DeviceSparsifier("dgc", ReadIndexCoding(r), std::move(then)),
        ratio_(r.Double("ratio", 0.01, 0.0, 1.0)),
        sample_ratio_(r.Double("sample_ratio", 0.01, 1e-6, 1.0)),
        rng_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))) {}
  bool SetDensity(double ratio) override {
    GP_ENFORCE(ratio > 0 && ratio <= 1, "dgc: density ", ratio, " is not in (0, 1]");
    ratio_ = ratio;
    return true;
  }

 protected:
  // DgcCompressor::Select (dgc.cc), step for step.
  Kept Select(const float* in, int64_t n, const StepContext&, Stream stream) override {
    const int64_t k = KFromRatio(ratio_, n);
    if (k == 0) return Kept{};
    const auto sample = std::max<int64_t>(std::min<int64_t>(n, 1024),
                                          std::llround(sample_ratio_ * static_cast<double>(n)));
    selector_.SampleBounds(in, n, ratio_, sample, &rng_, stream);
    for (int round = 0;; ++round) {
      float t = 0.f;
      const int64_t count = selector_.Compact(in, n, Expect(ratio_, n), &t, stream);
      if (count >= (k * 4) / 5 || round == 3 || t == 0.f) break;
      t *= 0.75f;
      selector_.SetBounds(-t, t, t, stream);
    }
    return selector_.KeepLargest(k, stream);
  }
  void SaveOwnState(std::string* out) const override { SaveRngState(rng_, out); }
  void LoadOwnState(std::string_view in) override { LoadRngState(in, "dgc", &rng_); }

 private:
  double ratio_;
  double sample_ratio_;
  Rng rng_;
};

class DeviceThreshold : public DeviceSparsifier {
 public:
  DeviceThreshold(ParamReader& r, std::unique_ptr<DeviceQuantizer> then)
      : DeviceSparsifier("threshold", ReadIndexCoding(r), std::move(then)),
        threshold_(static_cast<float>(r.Double("threshold", 0.01, 0.0, 3.0e38))) {}

 protected:
  Kept Select(const float* in, int64_t n, const StepContext&, Stream stream) override {
    if (n == 0) return Kept{};
    selector_.SetBounds(-threshold_, threshold_, threshold_, stream);
    float t = 0.f;
    // The count follows the data; the buffer keeps the largest size seen.
    selector_.Compact(in, n, n / 64 + kSlack, &t, stream);
    return selector_.Survivors();
  }

 private:
  float threshold_;
};

class DeviceGaussianK : public DeviceSparsifier {
 public:
  DeviceGaussianK(ParamReader& r, std::unique_ptr<DeviceQuantizer> then)
      : DeviceSparsifier("gaussiank", ReadIndexCoding(r), std::move(then)),
        ratio_(r.Double("ratio", 0.01, 1e-9, 1.0)),
        z_(TwoSidedNormalQuantile(ratio_)) {}
  bool SetDensity(double ratio) override {
    GP_ENFORCE(ratio >= 1e-9 && ratio <= 1, "gaussiank: density ", ratio, " is not in [1e-9, 1]");
    ratio_ = ratio;
    z_ = TwoSidedNormalQuantile(ratio);
    return true;
  }

 protected:
  // MeanStd, then FilterOutside(mean - z std, mean + z std); a NaN or Inf mean or std makes
  // Encode throw (the error word), as the CPU codec does.
  Kept Select(const float* in, int64_t n, const StepContext&, Stream stream) override {
    if (n == 0) return Kept{};
    selector_.GaussianBounds(in, n, z_, err_.device(), stream);
    float t = 0.f;
    selector_.Compact(in, n, Expect(ratio_, n), &t, stream);
    return selector_.Survivors();
  }

 private:
  double ratio_;  // sizes the survivor buffer only
  double z_;
};

class DeviceRandomK : public DeviceSparsifier {
 public:
  DeviceRandomK(ParamReader& r, std::unique_ptr<DeviceQuantizer> then)
      : DeviceSparsifier("randomk", IndexCoding::kSeeded, std::move(then)),
        ratio_(r.Double("ratio", 0.01, 0.0, 1.0)),
        seed_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))),
        unbiased_(r.Bool("unbiased", true)) {}
  bool SetDensity(double ratio) override {
    GP_ENFORCE(ratio > 0 && ratio <= 1, "randomk: density ", ratio, " is not in (0, 1]");
    ratio_ = ratio;
    return true;
  }

 protected:
  // RandomKCompressor::Select: the shared seed is computed here, the indices on the device.
  Kept Select(const float* in, int64_t n, const StepContext& ctx, Stream stream) override {
    Kept kept;
    kept.k = KFromRatio(ratio_, n);
    kept.seed = Seed(seed_, ctx.key, ctx.step);
    int32_t* idx = idx_.as<int32_t>(std::max<int64_t>(kept.k, 1));
    float* val = val_.as<float>(std::max<int64_t>(kept.k, 1));
    StratifiedSelectAsync(in, Rng(kept.seed).state(), kept.k, n, unbiased_, idx, val, stream);
    kept.indices = idx;
    kept.values = val;
    return kept;
  }

 private:
  double ratio_;
  uint64_t seed_;
  bool unbiased_;
  DeviceBytes idx_, val_;
};

}  // namespace

std::unique_ptr<DeviceCodec> MakeDeviceSparsifier(const std::string& name, ParamReader& r,
                                                  std::unique_ptr<DeviceQuantizer> then) {
  if (name == "topk") return std::make_unique<DeviceTopK>(r, std::move(then));
  if (name == "randomk") return std::make_unique<DeviceRandomK>(r, std::move(then));
  if (name == "threshold") return std::make_unique<DeviceThreshold>(r, std::move(then));
  if (name == "gaussiank") return std::make_unique<DeviceGaussianK>(r, std::move(then));
  if (name == "dgc") return std::make_unique<DeviceDgc>(r, std::move(then));
  return nullptr;
}

}  // namespace gradpress::compressors::cuda
