#include "compressors/none.h"

#include <cstring>

#include "common/byte_io.h"

namespace gradpress::compressors {

void NoneCompressor::EncodeTo(const float* in, int64_t n, const StepContext&, std::string* out) {
  ByteWriter(out).PutBytes(in, static_cast<size_t>(n) * sizeof(float));
}

void NoneCompressor::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  ByteReader r(bytes, "none");
  std::string_view raw = r.GetBytes(static_cast<size_t>(n) * sizeof(float), "float32 values");
  r.ExpectEnd();
  if (n) std::memcpy(out, raw.data(), raw.size());
}

}  // namespace gradpress::compressors
