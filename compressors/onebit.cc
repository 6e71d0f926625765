#include "compressors/onebit.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/byte_io.h"

namespace gradpress::compressors {
namespace {
constexpr uint32_t kMaxBucket = 1u << 30;
}

OneBitCompressor::OneBitCompressor(ParamReader& r)
    : two_means_(r.Choice("scaling", "two_means", {"mean", "two_means"}) == "two_means"),
      bucket_(static_cast<uint32_t>(r.Int("bucket_size", 1024, 1, kMaxBucket))) {}

void OneBitCompressor::EncodeTo(const float* in, int64_t n, const StepContext&, std::string* out) {
  const int64_t nb = (n + bucket_ - 1) / bucket_;
  const int per = two_means_ ? 2 : 1;
  ByteWriter w(out);
  w.Put<uint8_t>(two_means_ ? 1 : 0);
  w.Put<uint32_t>(bucket_);
  // Written with memcpy: after a header (or a sparsifier's indices) they are unaligned.
  char* scales = w.Extend(static_cast<size_t>(nb) * per * sizeof(float));
  auto set_scale = [scales](int64_t j, float v) { std::memcpy(scales + j * sizeof(float), &v, 4); };
  for (int64_t k = 0; k < nb; ++k) {
    const float* v = in + k * bucket_;
    const int64_t len = std::min<int64_t>(bucket_, n - k * bucket_);
    // Eight float lanes per sum (vectorised); NaN counted apart (it is neither sign).
    float pos_l[8] = {}, neg_l[8] = {};
    int32_t npos_l[8] = {}, nan_l[8] = {};
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
      for (int j = 0; j < 8; ++j) {
        const float x = v[i + j];
        pos_l[j] += x >= 0.f ? x : 0.f;
        neg_l[j] += x < 0.f ? -x : 0.f;
        npos_l[j] += x >= 0.f;
        nan_l[j] += x != x;
      }
    }
    for (; i < len; ++i) {
      pos_l[0] += v[i] >= 0.f ? v[i] : 0.f;
      neg_l[0] += v[i] < 0.f ? -v[i] : 0.f;
      npos_l[0] += v[i] >= 0.f;
      nan_l[0] += v[i] != v[i];
    }
    double pos = 0.0, neg = 0.0;
    int64_t npos = 0, nans = 0;
    for (int j = 0; j < 8; ++j) {
      pos += pos_l[j];
      neg += neg_l[j];
      npos += npos_l[j];
      nans += nan_l[j];
    }
    GP_ENFORCE(nans == 0 && std::isfinite(pos) && std::isfinite(neg), "onebit: bucket ", k,
               " has a NaN or Inf element");
    if (two_means_) {
      set_scale(2 * k, npos ? static_cast<float>(pos / npos) : 0.f);
      set_scale(2 * k + 1, len - npos ? static_cast<float>(neg / (len - npos)) : 0.f);
    } else {
      set_scale(k, len ? static_cast<float>((pos + neg) / len) : 0.f);
    }
  }
  auto* signs = reinterpret_cast<uint8_t*>(w.Extend((static_cast<size_t>(n) + 7) / 8));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint8_t byte = 0;
    for (int j = 0; j < 8; ++j) byte |= static_cast<uint8_t>(in[i + j] < 0.f) << j;
    signs[i / 8] = byte;
  }
  if (i < n) {
    uint8_t byte = 0;
    for (int j = 0; i + j < n; ++j) byte |= static_cast<uint8_t>(in[i + j] < 0.f) << j;
    signs[i / 8] = byte;
  }
}

void OneBitCompressor::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  ByteReader r(bytes, "onebit");
  const auto mode = r.Get<uint8_t>("scaling");
  GP_ENFORCE(mode <= 1, "onebit: unknown scaling mode ", int{mode});
  const uint32_t bucket = r.Get<uint32_t>("bucket_size");
  GP_ENFORCE(bucket >= 1 && bucket <= kMaxBucket, "onebit: bucket_size ", bucket, " out of range");
  const int per = mode ? 2 : 1;
  const int64_t nb = (n + bucket - 1) / bucket;
  std::string_view raw = r.GetBytes(static_cast<size_t>(nb) * per * sizeof(float), "scales");
  std::string_view sign_bytes = r.GetBytes((static_cast<size_t>(n) + 7) / 8, "sign bits");
  r.ExpectEnd();
  if (n % 8) {
    const auto last = static_cast<uint8_t>(sign_bytes.back());
    GP_ENFORCE((last >> (n % 8)) == 0, "onebit: non-zero padding bits");
  }
  const auto* signs = reinterpret_cast<const uint8_t*>(sign_bytes.data());
  for (int64_t k = 0; k < nb; ++k) {
    float p, q;
    std::memcpy(&p, raw.data() + k * per * sizeof(float), sizeof(float));
    q = p;
    if (per == 2) std::memcpy(&q, raw.data() + (k * 2 + 1) * sizeof(float), sizeof(float));
    GP_ENFORCE(std::isfinite(p) && std::isfinite(q) && p >= 0.f && q >= 0.f, "onebit: bucket ", k,
               " has scales ", p, ", ", q);
    const int64_t begin = k * bucket, end = std::min<int64_t>(n, begin + bucket);
    const float value[2] = {p, -q};  // indexed, not branched: signs are coin flips
    for (int64_t i = begin; i < end; ++i) out[i] = value[(signs[i >> 3] >> (i & 7)) & 1];
  }
}

}  // namespace gradpress::compressors
