#include "compressors/int8.h"

#include <algorithm>
#include <cmath>

#include "common/byte_io.h"

namespace gradpress::compressors {

void Int8Compressor::EncodeTo(const float* in, int64_t n, const StepContext&, std::string* out) {
  float lo = n ? in[0] : 0.f, hi = lo;
  bool nan = false;  // min and max skip a NaN that is not first
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, in[i]);
    hi = std::max(hi, in[i]);
    nan |= in[i] != in[i];
  }
  GP_ENFORCE(!nan && std::isfinite(lo) && std::isfinite(hi), "int8: input has NaN or Inf");
  // hi - lo may exceed FLT_MAX; the scale (at most 2 FLT_MAX / 255) may not.
  const float scale = static_cast<float>((static_cast<double>(hi) - lo) / 255.0);
  const float inv = scale > 0.f ? 1.f / scale : 0.f;
  ByteWriter w(out);
  w.Put<float>(lo);
  w.Put<float>(scale);
  auto* q = reinterpret_cast<uint8_t*>(w.Extend(static_cast<size_t>(n)));
  if (std::isfinite(hi - lo)) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = (in[i] - lo) * inv + 0.5f;
      // max(0, v) also maps NaN (0 x inf when a subnormal scale has no finite inverse) to 0.
      q[i] = static_cast<uint8_t>(std::min(std::max(0.f, v), 255.f));
    }
  } else {  // in[i] - lo may overflow float: in double
    for (int64_t i = 0; i < n; ++i) {
      const double v = (static_cast<double>(in[i]) - lo) * inv + 0.5;
      q[i] = static_cast<uint8_t>(std::min(std::max(0.0, v), 255.0));
    }
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
  if (std::isfinite(255.f * scale)) {
    for (int64_t i = 0; i < n; ++i) out[i] = lo + static_cast<float>(q[i]) * scale;
  } else {  // a range wider than FLT_MAX: q * scale overflows where lo + q * scale does not
    for (int64_t i = 0; i < n; ++i)
      out[i] = static_cast<float>(lo + static_cast<double>(q[i]) * scale);
  }
}

}  // namespace gradpress::compressors
