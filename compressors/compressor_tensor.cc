// The tensor-facing half of the compressor interface (Compressor::Encode / Decode on
// LibTorch tensors), in library gp_compressors_torch: the worker side links it, the server
// never does (it calls the host kernels EncodeTo / DecodeTo only).
#include <torch/types.h>

#include "common/error.h"
#include "compressors/compressor.h"

namespace gradpress::compressors {
namespace {

DType FromTorch(torch::Dtype d) {
  switch (d) {
    case torch::kFloat32:
      return DType::kFloat32;
    case torch::kFloat16:
      return DType::kFloat16;
    case torch::kBFloat16:
      return DType::kBFloat16;
    case torch::kFloat64:
      return DType::kFloat64;
    default:
      throw InvalidArgument(std::string("compressors encode floating-point tensors, got ") +
                            c10::toString(d));
  }
}

torch::Dtype ToTorch(DType d) {
  switch (d) {
    case DType::kFloat32:
      return torch::kFloat32;
    case DType::kFloat16:
      return torch::kFloat16;
    case DType::kBFloat16:
      return torch::kBFloat16;
    case DType::kFloat64:
      return torch::kFloat64;
  }
  throw InvalidArgument("payload has unknown dtype code " + std::to_string(static_cast<int>(d)));
}

}  // namespace

Payload Compressor::Encode(const torch::Tensor& dense, const StepContext& ctx) {
  GP_ENFORCE(dense.defined(), Name(), ": cannot encode an undefined tensor");
  Payload p;
  p.codec = Name();
  p.shape = dense.sizes().vec();
  p.dtype = FromTorch(dense.scalar_type());
  // CUDA or non-float32 input goes through one contiguous CPU float32 copy; CPU float32
  // contiguous input is used in place.
  const torch::Tensor host = dense.detach().to(torch::kCPU, torch::kFloat32).contiguous();
  EncodeTo(host.data_ptr<float>(), host.numel(), ctx, &p.bytes);
  return p;
}

torch::Tensor Compressor::Decode(const Payload& p) const {
  GP_ENFORCE(p.codec == Name(), "payload was encoded by '", p.codec, "', this decoder is '", Name(),
             "'");
  const int64_t n = p.numel();
  const torch::Dtype dtype = ToTorch(p.dtype);
  torch::Tensor out = torch::empty(p.shape, torch::kFloat32);
  DecodeTo(p.bytes, n, out.data_ptr<float>());
  return dtype == torch::kFloat32 ? out : out.to(dtype);
}

torch::Tensor Compressor::Decode(const Payload& p, const torch::Device& device) const {
  return Decode(p).to(device);
}

}  // namespace gradpress::compressors
