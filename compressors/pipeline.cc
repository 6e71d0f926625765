#include "compressors/pipeline.h"

#include "common/byte_io.h"
#include "common/error.h"

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
  std::vector<int32_t> indices;
  std::vector<float> values;
  DecodeSparse(bytes, n, &indices, &values);
  Scatter(indices, values.data(), n, out);
}

bool Pipeline::DecodeSparse(std::string_view bytes, int64_t n, std::vector<int32_t>* indices,
                            std::vector<float>* values) const {
  const std::string name = Name();
  ByteReader r(bytes, name.c_str());
  sparsifier_->ReadIndices(r, n, indices);
  values->resize(indices->size());
  quantizer_->DecodeTo(r.Rest(), static_cast<int64_t>(values->size()), values->data());
  return true;
}

void Pipeline::SaveState(std::string* out) const {
  std::string first;
  sparsifier_->SaveState(&first);
  ByteWriter w(out);
  w.PutVarint(first.size());
  w.PutBytes(first.data(), first.size());
  quantizer_->SaveState(out);
}

void Pipeline::LoadState(std::string_view in) {
  ByteReader r(in, "pipeline state");
  const uint64_t n = r.GetVarint("sparsifier state length");
  GP_ENFORCE(n <= r.remaining(), "pipeline state: sparsifier state of ", n, " bytes, ",
             r.remaining(), " left");
  sparsifier_->LoadState(r.GetBytes(n, "sparsifier state"));
  quantizer_->LoadState(r.Rest());
}

}  // namespace gradpress::compressors
