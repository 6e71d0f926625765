#include "compressors/sparsifier.h"

#include <cstring>
#include <limits>

namespace gradpress::compressors {

IndexCoding ReadIndexCoding(ParamReader& r) {
  return r.Choice("index_coding", "delta", {"delta", "int32"}) == "int32" ? IndexCoding::kInt32
                                                                          : IndexCoding::kDelta;
}

void Sparsifier::WriteIndices(const Selection& sel, std::string* out) const {
  ByteWriter w(out);
  const size_t k = sel.indices.size();
  w.Put<uint8_t>(static_cast<uint8_t>(coding_));
  w.PutVarint(k);
  if (coding_ == IndexCoding::kInt32) {
    w.PutBytes(sel.indices.data(), k * sizeof(int32_t));
  } else {
    GP_ENFORCE_AS(Internal, coding_ == IndexCoding::kDelta, Name(), ": bad index coding");
    int64_t prev = -1;
    for (int32_t idx : sel.indices) {
      w.PutVarint(static_cast<uint64_t>(idx - prev - 1));
      prev = idx;
    }
  }
}

void Sparsifier::ReadIndices(ByteReader& r, int64_t n, std::vector<int32_t>* indices) const {
  const auto coding = r.Get<uint8_t>("index coding");
  const uint64_t k = r.GetVarint("k");
  GP_ENFORCE(k <= static_cast<uint64_t>(n), r.context(), ": k=", k, " exceeds numel ", n);
  indices->resize(k);
  if (coding == static_cast<uint8_t>(IndexCoding::kInt32)) {
    std::string_view raw = r.GetBytes(k * sizeof(int32_t), "int32 indices");
    if (k > 0) std::memcpy(indices->data(), raw.data(), raw.size());  // data() null at k = 0
    int64_t prev = -1;
    for (int32_t idx : *indices) {
      GP_ENFORCE(idx > prev && idx < n, r.context(), ": index ", idx,
                 " out of order or out of range [0, ", n, ")");
      prev = idx;
    }
  } else if (coding == static_cast<uint8_t>(IndexCoding::kDelta)) {
    uint64_t pos = 0;
    for (uint64_t i = 0; i < k; ++i) {
      const uint64_t gap = r.GetVarint("index gap");
      GP_ENFORCE(gap < static_cast<uint64_t>(n), r.context(), ": index gap ", gap,
                 " out of range for numel ", n);
      pos = (i == 0 ? 0 : pos + 1) + gap;
      GP_ENFORCE(pos < static_cast<uint64_t>(n), r.context(), ": index ", pos, " out of range [0, ",
                 n, ")");
      (*indices)[i] = static_cast<int32_t>(pos);
    }
  } else {
    throw InvalidArgument(std::string(r.context()) + ": unknown index coding " +
                          std::to_string(coding));
  }
}

void Sparsifier::EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) {
  GP_ENFORCE(n <= std::numeric_limits<int32_t>::max(), Name(), ": tensors above 2^31-1 elements ",
             "are not supported by int32 indices (numel ", n, ")");
  scratch_.Clear();
  Select(in, n, ctx, &scratch_);
  WriteIndices(scratch_, out);
  ByteWriter(out).PutBytes(scratch_.values.data(), scratch_.values.size() * sizeof(float));
}

void Sparsifier::DecodeTo(std::string_view bytes, int64_t n, float* out) const {
  std::vector<int32_t> indices;
  std::vector<float> values;
  DecodeSparse(bytes, n, &indices, &values);
  Scatter(indices, values.data(), n, out);
}

bool Sparsifier::DecodeSparse(std::string_view bytes, int64_t n, std::vector<int32_t>* indices,
                              std::vector<float>* values) const {
  const std::string name = Name();
  ByteReader r(bytes, name.c_str());
  ReadIndices(r, n, indices);
  std::string_view raw = r.GetBytes(indices->size() * sizeof(float), "values");
  r.ExpectEnd();
  values->resize(indices->size());
  if (!raw.empty()) std::memcpy(values->data(), raw.data(), raw.size());
  return true;
}

void Scatter(const std::vector<int32_t>& indices, const float* values, int64_t n, float* out) {
  if (n > 0) std::memset(out, 0, static_cast<size_t>(n) * sizeof(float));  // out may be null at 0
  for (size_t i = 0; i < indices.size(); ++i) out[indices[i]] = values[i];
}

}  // namespace gradpress::compressors
