#include "compressors/randomk.h"

#include <limits>

#include "common/error.h"

namespace gradpress::compressors {

RandomKCompressor::RandomKCompressor(ParamReader& r)
    : Sparsifier(IndexCoding::kSeeded),
      ratio_(r.Double("ratio", 0.01, 0.0, 1.0)),
      seed_(static_cast<uint64_t>(r.Int("seed", 1, 0, std::numeric_limits<int64_t>::max()))),
      unbiased_(r.Bool("unbiased", true)) {}

void StratifiedIndices(uint64_t seed, int64_t k, int64_t n, std::vector<int32_t>* indices,
                       std::vector<int64_t>* sizes) {
  indices->resize(k);
  if (sizes) sizes->resize(k);
  Rng rng(seed);
  for (int64_t j = 0; j < k; ++j) {
    // floor(j n / k) without overflow for n, k < 2^31.
    const int64_t begin = static_cast<int64_t>((static_cast<__int128>(j) * n) / k);
    const int64_t end = static_cast<int64_t>((static_cast<__int128>(j + 1) * n) / k);
    (*indices)[j] = static_cast<int32_t>(begin + static_cast<int64_t>(rng.Below(end - begin)));
    if (sizes) (*sizes)[j] = end - begin;
  }
}

void RandomKCompressor::Select(const float* in, int64_t n, const StepContext& ctx, Selection* sel) {
  const int64_t k = KFromRatio(ratio_, n);
  sel->seed = Seed(seed_, ctx.key, ctx.step);
  std::vector<int64_t> sizes;
  StratifiedIndices(sel->seed, k, n, &sel->indices, &sizes);
  sel->values.resize(k);
  for (int64_t j = 0; j < k; ++j) {
    const float v = in[sel->indices[j]];
    sel->values[j] = unbiased_ ? v * static_cast<float>(sizes[j]) : v;
  }
}

void RandomKCompressor::WriteIndices(const Selection& sel, std::string* out) const {
  ByteWriter w(out);
  w.Put<uint8_t>(static_cast<uint8_t>(IndexCoding::kSeeded));
  w.PutVarint(sel.indices.size());
  w.Put<uint64_t>(sel.seed);
}

void RandomKCompressor::ReadIndices(ByteReader& r, int64_t n, std::vector<int32_t>* indices) const {
  const auto coding = r.Get<uint8_t>("index coding");
  GP_ENFORCE(coding == static_cast<uint8_t>(IndexCoding::kSeeded), "randomk: index coding ",
             int{coding}, " is not seeded (2)");
  const uint64_t k = r.GetVarint("k");
  GP_ENFORCE(k <= static_cast<uint64_t>(n), "randomk: k=", k, " exceeds numel ", n);
  const auto seed = r.Get<uint64_t>("seed");
  StratifiedIndices(seed, static_cast<int64_t>(k), n, indices);
}

bool RandomKCompressor::SetDensity(double ratio) {
  GP_ENFORCE(ratio > 0 && ratio <= 1, "randomk: density ", ratio, " is not in (0, 1]");
  ratio_ = ratio;
  return true;
}

}  // namespace gradpress::compressors
