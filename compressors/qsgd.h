#pragma once
// qsgd: Alistarh et al., "QSGD: Communication-Efficient SGD via Gradient Quantization and
// Encoding", NeurIPS 2017.
//
// Per bucket v of `bucket_size` elements with norm ||v|| (L2, or max with norm: max) and s
// levels: r_i = s |v_i| / ||v||, l = floor(r_i), and the level is l + 1 with probability
// r_i - l, else l (stochastic rounding). Q(v_i) = ||v|| sign(v_i) level_i / s.
// E[Q(v)] = v (unbiased); with the L2 norm Var <= min(d / s^2, sqrt(d) / s) ||v||^2.
// Levels lie in [0, s], so a bucket decodes to at most s + 1 distinct magnitudes.
//
// Wire format (little-endian):
//   u8  flags: bit 0 = Elias coding, bit 1 = max norm (else L2); other bits zero
//   u16 s (1..65535)          u32 bucket_size (1..2^24)
//   nb = ceil(n / bucket_size) x f32 bucket norms (finite, >= 0)
//   bit stream (bit_pack.h), per element in order:
//     fixed: level in b = ceil(log2(s + 1)) bits, then a sign bit (1 = negative;
//            0 when the level is 0)
//     elias: Elias gamma of level + 1, then a sign bit only when level > 0
// Bytes: fixed 7 + 4 nb + ceil(n (b + 1) / 8); elias 7 + 4 nb + ceil(total code bits / 8).
// Elias is the default (the paper's encoding): with s = 16 most levels are 0 or 1, about
// 2.5 bits per element, where fixed width needs b + 1 = 6 bits.
//
// Parameters: levels (16), bucket_size (512), norm (l2 | max), elias (true), seed (1).
#include "common/byte_io.h"
#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "compressors/rng.h"

namespace gradpress::compressors {

// The fixed part of the wire format, checked: flags, s and bucket_size.
struct QsgdHeader {
  static constexpr uint8_t kElias = 1, kMaxNorm = 2;
  static constexpr uint32_t kMaxBucket = 1u << 24;
  uint8_t flags = 0;
  uint32_t levels = 0;  // s
  uint32_t bucket = 0;
  bool elias() const { return flags & kElias; }
};
// Reads and validates the header (InvalidArgument naming the field); the CPU and the GPU
// decoders share it.
QsgdHeader ReadQsgdHeader(ByteReader& r);

class QsgdCompressor : public Compressor {
 public:
  explicit QsgdCompressor(ParamReader& r);
  std::string Name() const override { return "qsgd"; }
  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
  void SaveState(std::string* out) const override { SaveRngState(rng_, out); }
  void LoadState(std::string_view in) override { LoadRngState(in, "qsgd", &rng_); }

  // ceil(log2(s + 1)): the fixed-width level field.
  static int LevelBits(uint32_t s);

 private:
  uint32_t levels_;
  uint32_t bucket_;
  bool max_norm_;
  bool elias_;
  Rng rng_;
};

}  // namespace gradpress::compressors
