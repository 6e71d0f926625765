#include "compressors/momentum_correction.h"

#include <cstring>

#include "common/byte_io.h"
#include "common/error.h"

namespace gradpress::compressors {

MomentumCorrection::MomentumCorrection(std::unique_ptr<Compressor> inner, double momentum)
    : inner_(std::move(inner)), momentum_(static_cast<float>(momentum)) {
  GP_ENFORCE_AS(Internal, inner_ != nullptr, "MomentumCorrection needs a codec");
  GP_ENFORCE(momentum >= 0 && momentum < 1, "momentum correction: momentum ", momentum,
             " is not in [0, 1)");
}

void MomentumCorrection::EncodeTo(const float* in, int64_t n, const StepContext& ctx,
                                  std::string* out) {
  if (u_.empty() && v_.empty()) {
    u_.assign(n, 0.f);
    v_.assign(n, 0.f);
  }
  GP_ENFORCE(static_cast<int64_t>(u_.size()) == n, Name(), " with momentum correction: tensor has ",
             n, " elements, the state ", u_.size());
  for (int64_t i = 0; i < n; ++i) {
    u_[i] = momentum_ * u_[i] + in[i];
    v_[i] += u_[i];
  }
  const size_t start = out->size();
  inner_->EncodeTo(v_.data(), n, ctx, out);
  sent_.resize(n);
  inner_->DecodeTo(std::string_view(*out).substr(start), n, sent_.data());
  for (int64_t i = 0; i < n; ++i) {
    v_[i] -= sent_[i];
    if (sent_[i] != 0.f) u_[i] = 0.f;
  }
}

void MomentumCorrection::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  inner_->DecodeTo(bytes, n, out);
}

void MomentumCorrection::SaveState(std::string* out) const {
  ByteWriter w(out);
  w.PutVarint(u_.size());
  w.PutBytes(u_.data(), u_.size() * sizeof(float));
  w.PutBytes(v_.data(), v_.size() * sizeof(float));
  inner_->SaveState(out);
}

void MomentumCorrection::LoadState(std::string_view in) {
  ByteReader r(in, "momentum correction state");
  const uint64_t n = r.GetVarint("numel");
  GP_ENFORCE(n <= in.size() / (2 * sizeof(float)), "momentum correction state: ", n,
             " elements in ", in.size(), " bytes");
  std::vector<float> u(n), v(n);
  const std::string_view ub = r.GetBytes(n * sizeof(float), "u");
  const std::string_view vb = r.GetBytes(n * sizeof(float), "v");
  if (n > 0) {
    std::memcpy(u.data(), ub.data(), ub.size());
    std::memcpy(v.data(), vb.data(), vb.size());
  }
  inner_->LoadState(r.Rest());
  u_ = std::move(u);
  v_ = std::move(v);
}

}  // namespace gradpress::compressors
