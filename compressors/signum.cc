#include "compressors/signum.h"

#include <cstring>
#include <string>

#include "common/byte_io.h"

namespace gradpress::compressors {
namespace {

constexpr int64_t kMaxBucket = int64_t{1} << 30;  // onebit's limit

std::unique_ptr<OneBitCompressor> MeanSign(int64_t bucket_size) {
  CodecSpec c;
  c.codec = "onebit";
  c.params = {{"scaling", "mean"}, {"bucket_size", std::to_string(bucket_size)}};
  ParamReader r(c);
  auto codec = std::make_unique<OneBitCompressor>(r);
  r.Finish();
  return codec;
}

}  // namespace

SignumCompressor::SignumCompressor(ParamReader& r)
    : beta_(static_cast<float>(r.Double("beta", 0.9, 0.0, 0.9999))),
      sign_(MeanSign(r.Int("bucket_size", kMaxBucket, 1, kMaxBucket))) {}

void SignumCompressor::EncodeTo(const float* in, int64_t n, const StepContext& ctx,
                                std::string* out) {
  if (static_cast<int64_t>(momentum_.size()) != n) momentum_.assign(n, 0.f);
  next_.resize(n);
  const float beta = beta_, one_minus = 1.f - beta_;
  for (int64_t i = 0; i < n; ++i) next_[i] = beta * momentum_[i] + one_minus * in[i];
  sign_->EncodeTo(next_.data(), n, ctx, out);  // throws on NaN or Inf: m stays as it was
  momentum_.swap(next_);
}

void SignumCompressor::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  GP_ENFORCE(bytes.empty() || bytes[0] == 0, "signum: scaling mode ",
             static_cast<int>(static_cast<uint8_t>(bytes[0])), ", expected 0 (mean)");
  sign_->DecodeTo(bytes, n, out);
}

void SignumCompressor::SaveState(std::string* out) const {
  ByteWriter w(out);
  w.PutVarint(momentum_.size());
  w.PutBytes(momentum_.data(), momentum_.size() * sizeof(float));
}

void SignumCompressor::LoadState(std::string_view in) {
  ByteReader r(in, "signum state");
  const uint64_t d = r.GetVarint("momentum numel");
  GP_ENFORCE(d == r.remaining() / sizeof(float) && r.remaining() % sizeof(float) == 0,
             "signum state: momentum of ", d, " floats in ", r.remaining(), " bytes");
  std::string_view bytes = r.GetBytes(d * sizeof(float), "momentum");
  r.ExpectEnd();
  std::vector<float> m(d);
  if (d) std::memcpy(m.data(), bytes.data(), bytes.size());
  momentum_ = std::move(m);
}

}  // namespace gradpress::compressors
