#include "compressors/int8.h"

#include <algorithm>
#include <cmath>

#include "common/byte_io.h"

namespace gradpress::compressors {

void Int8Compressor::EncodeTo(const float* in, int64_t n, const StepContext&, std::string* out) {
  float lo = n ? in[0] : 0.f, hi = lo;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, in[i]);
    hi = std::max(hi, in[i]);
  }
  GP_ENFORCE(std::isfinite(lo) && std::isfinite(hi), "int8: input has NaN or Inf");
  const float scale = (hi - lo) / 255.f;
  const float inv = scale > 0.f ? 1.f / scale : 0.f;
  ByteWriter w(out);
  w.Put<float>(lo);
  w.Put<float>(scale);
  auto* q = reinterpret_cast<uint8_t*>(w.Extend(static_cast<size_t>(n)));
  for (int64_t i = 0; i < n; ++i) {
    const float v = (in[i] - lo) * inv + 0.5f;
    q[i] = static_cast<uint8_t>(std::min(v, 255.f));
  }
}

void Int8Compressor::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  ByteReader r(bytes, "int8");
  const auto lo = r.Get<float>("min");
  const auto scale = r.Get<float>("scale");
  GP_ENFORCE(std::isfinite(lo) && std::isfinite(scale) && scale >= 0.f,
             "int8: min and scale must be finite and scale >= 0 (min=", lo, ", scale=", scale, ")");
  std::string_view raw = r.GetBytes(static_cast<size_t>(n), "levels");
  r.ExpectEnd();
  const auto* q = reinterpret_cast<const uint8_t*>(raw.data());
  for (int64_t i = 0; i < n; ++i) out[i] = lo + static_cast<float>(q[i]) * scale;
}

}  // namespace gradpress::compressors
