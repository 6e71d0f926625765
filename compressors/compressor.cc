#include "compressors/compressor.h"

#include "common/error.h"
#include "common/shape.h"

namespace gradpress::compressors {

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat64:
      return "float64";
  }
  return "unknown";
}

int64_t Payload::numel() const { return NumelOf(shape); }

double Payload::Ratio() const {
  const double dense = 4.0 * static_cast<double>(numel());
  return bytes.empty() ? 0.0 : dense / static_cast<double>(bytes.size());
}

std::string Compressor::EncodeBytes(const float* in, int64_t n, const StepContext& ctx) {
  std::string out;
  EncodeTo(in, n, ctx, &out);
  return out;
}

void Compressor::SaveState(std::string* /*out*/) const {}

void Compressor::LoadState(std::string_view in) {
  GP_ENFORCE(in.empty(), Name(), " keeps no state, but the checkpoint holds ", in.size(),
             " bytes of it (a different codec?)");
}

std::vector<float> Compressor::DecodeBytes(std::string_view bytes, int64_t n) const {
  std::vector<float> out(n);
  DecodeTo(bytes, n, out.data());
  return out;
}

}  // namespace gradpress::compressors
