#include "compressors/pipeline.h"

namespace gradpress::compressors {

Pipeline::Pipeline(std::unique_ptr<Sparsifier> sparsifier, std::unique_ptr<Compressor> quantizer)
    : sparsifier_(std::move(sparsifier)), quantizer_(std::move(quantizer)) {
  GP_ENFORCE_AS(Internal, sparsifier_ && quantizer_, "Pipeline needs two codecs");
}

void Pipeline::EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) {
  scratch_.Clear();
  sparsifier_->Select(in, n, ctx, &scratch_);
  sparsifier_->WriteIndices(scratch_, out);
  quantizer_->EncodeTo(scratch_.values.data(), static_cast<int64_t>(scratch_.values.size()), ctx,
                       out);
}

void Pipeline::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  const std::string name = Name();
  ByteReader r(bytes, name.c_str());
  std::vector<int32_t> indices;
  sparsifier_->ReadIndices(r, n, &indices);
  std::vector<float> values(indices.size());
  quantizer_->DecodeTo(r.Rest(), static_cast<int64_t>(values.size()), values.data());
  Scatter(indices, values.data(), n, out);
}

}  // namespace gradpress::compressors
