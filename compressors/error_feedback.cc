#include "compressors/error_feedback.h"

#include <cstring>

#include "common/byte_io.h"
#include "common/error.h"

namespace gradpress::compressors {

ErrorFeedback::ErrorFeedback(std::unique_ptr<Compressor> inner) : inner_(std::move(inner)) {
  GP_ENFORCE_AS(Internal, inner_ != nullptr, "ErrorFeedback needs a codec");
}

void ErrorFeedback::EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) {
  if (residual_.empty()) residual_.assign(n, 0.f);
  GP_ENFORCE(static_cast<int64_t>(residual_.size()) == n, Name(),
             " with error feedback: tensor has ", n, " elements, the residual ", residual_.size());
  const size_t start = out->size();
  if (inner_->IsSparse()) {
    // D(C(p)) is 0 outside the kept indices, where p - 0 is p bit for bit: p is formed in
    // the residual itself and only the kept elements change, O(n) reads and O(k) writes
    // instead of a second buffer, a zeroed decode and a dense subtraction. (Should the inner
    // codec throw, the residual holds p: the gradient is kept, not lost.)
    for (int64_t i = 0; i < n; ++i) residual_[i] = in[i] + residual_[i];
    inner_->EncodeTo(residual_.data(), n, ctx, out);
    inner_->DecodeSparse(std::string_view(*out).substr(start), n, &kept_, &kept_values_);
    for (size_t j = 0; j < kept_.size(); ++j)
      residual_[kept_[j]] = residual_[kept_[j]] - kept_values_[j];
    return;
  }
  corrected_.resize(n);
  for (int64_t i = 0; i < n; ++i) corrected_[i] = in[i] + residual_[i];
  inner_->EncodeTo(corrected_.data(), n, ctx, out);
  // e = p - D(C(p)): decode what was just written into the residual, then subtract.
  inner_->DecodeTo(std::string_view(*out).substr(start), n, residual_.data());
  for (int64_t i = 0; i < n; ++i) residual_[i] = corrected_[i] - residual_[i];
}

void ErrorFeedback::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  inner_->DecodeTo(bytes, n, out);
}

void ErrorFeedback::SaveState(std::string* out) const {
  ByteWriter w(out);
  w.PutVarint(residual_.size());
  w.PutBytes(residual_.data(), residual_.size() * sizeof(float));
  inner_->SaveState(out);
}

void ErrorFeedback::LoadState(std::string_view in) {
  ByteReader r(in, "error feedback state");
  const uint64_t n = r.GetVarint("residual numel");
  GP_ENFORCE(n <= in.size() / sizeof(float), "error feedback state: residual of ", n, " floats in ",
             in.size(), " bytes");
  std::string_view bytes = r.GetBytes(n * sizeof(float), "residual");
  std::vector<float> residual(n);
  if (n > 0) std::memcpy(residual.data(), bytes.data(), bytes.size());
  inner_->LoadState(r.Rest());
  residual_ = std::move(residual);
}

}  // namespace gradpress::compressors
