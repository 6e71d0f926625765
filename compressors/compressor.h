#pragma once
// The compressor interface: a codec turns a dense gradient into a Payload (what travels)
// and back. Codecs are stateless apart from a seeded RNG; state carried across steps lives
// in decorators (ErrorFeedback), one instance per key and per side.
//
//   auto c = MakeCompressor(ParseCodecShorthand("qsgd levels=16"));
//   Payload p = c->Encode(grad, {"conv1.weight", step});   // any device, any float dtype
//   torch::Tensor g = c->Decode(p);                          // CPU tensor, p.shape, p.dtype
//
// Codecs implement two kernels on host float32 memory, EncodeTo and DecodeTo; the
// tensor-facing Encode/Decode copy CUDA or non-float32 input to a contiguous CPU float32
// tensor first (correct by construction on every device) and cast the result back.
// Payload::bytes is the packed wire format documented in each codec's header and is what
// metrics count: ratio = 4 * numel / bytes.size().
// Decode throws gradpress::InvalidArgument on bytes that are truncated, extended or
// malformed, and never reads outside them.
// Thread-safety: Encode mutates the RNG (one instance per thread); Decode is const and may
// be called concurrently.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

// Forward declarations keep codec translation units free of the (slow) LibTorch headers;
// at::Tensor is torch::Tensor.
namespace at {
class Tensor;
}
namespace c10 {
struct Device;
}

namespace gradpress::compressors {

// Element type of the dense tensor a payload encodes (codecs compute in float32).
enum class DType : uint8_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2, kFloat64 = 3 };
const char* DTypeName(DType d);

struct Payload {
  std::string codec;           // registry name, e.g. "qsgd" or "topk+qsgd"
  std::vector<int64_t> shape;  // dense shape of the tensor it encodes
  DType dtype = DType::kFloat32;
  std::string bytes;      // packed wire format of that codec
  int64_t numel() const;  // product of shape; throws InvalidArgument if malformed
  double Ratio() const;   // dense float32 bytes / payload bytes
};

// A named tensor's shape and element type (a model fingerprint is a list of these).
struct TensorSpec {
  std::string key;
  std::vector<int64_t> shape;
  DType dtype = DType::kFloat32;
};

// A payload with the name of the tensor it encodes.
struct KeyPayload {
  std::string key;
  Payload payload;
};

// Which tensor and step a payload belongs to: seeds shared-randomness codecs (randomk).
struct StepContext {
  std::string_view key;
  int64_t step = 0;
};

class Compressor {
 public:
  virtual ~Compressor() = default;

  // Registry name written into Payload::codec.
  virtual std::string Name() const = 0;
  // True when the payload is the float32 values themselves, little-endian (none; not a
  // decorator around it): lossless, and a caller may send a tensor's memory as the payload,
  // or check and copy received bytes straight into their destination as they arrive.
  virtual bool IsLossless() const { return false; }

  Payload Encode(const at::Tensor& dense, const StepContext& ctx = {});
  at::Tensor Decode(const Payload& p) const;
  at::Tensor Decode(const Payload& p, const c10::Device& device) const;

  // Kernels. EncodeTo appends the wire bytes for in[0..n) to *out. DecodeTo parses exactly
  // `bytes` (all of it) and writes all n outputs.
  virtual void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) = 0;
  virtual void DecodeTo(std::string_view bytes, int64_t n, float* out) const = 0;
  // Sparse codecs (the sparsifiers, and pipelines of one) yield what they kept instead of
  // the dense tensor, so a server can add a push in O(payload) rather than O(n):
  // DecodeSparse parses `bytes` with exactly DecodeTo's checks (and throws as it does) and
  // fills strictly increasing indices < n and their values; DecodeTo's output is those
  // values there and 0 elsewhere. Dense codecs: IsSparse false, DecodeSparse returns false.
  virtual bool IsSparse() const { return false; }
  virtual bool DecodeSparse(std::string_view /*bytes*/, int64_t /*n*/,
                            std::vector<int32_t>* /*indices*/,
                            std::vector<float>* /*values*/) const {
    return false;
  }

  // Checkpoint state carried across steps (residuals, RNG streams): SaveState appends it to
  // *out; LoadState restores it from exactly `in` (InvalidArgument on a mismatch). Stateless
  // codecs write nothing and accept only empty state.
  virtual void SaveState(std::string* out) const;
  virtual void LoadState(std::string_view in);

  // Changes the fraction of elements a sparsifier keeps (DGC's sparsity warm-up), keeping
  // all state; decorators and pipelines forward it. False if the codec has no density.
  virtual bool SetDensity(double /*ratio*/) { return false; }

  // Host-memory convenience wrappers around the kernels.
  std::string EncodeBytes(const float* in, int64_t n, const StepContext& ctx = {});
  std::vector<float> DecodeBytes(std::string_view bytes, int64_t n) const;
};

}  // namespace gradpress::compressors
