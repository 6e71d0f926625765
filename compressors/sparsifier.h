#pragma once
// Base of the sparsifying codecs (topk, randomk, threshold, gaussiank, dgc): they choose
// which elements travel; this class owns the shared wire format.
//
// Wire format (all sparsifiers; little-endian):
//   u8      index coding: 0 = int32, 1 = delta, 2 = seeded (randomk)
//   varint  k, the number of kept elements (LEB128)
//   indices int32:  k x int32, strictly increasing, each < numel
//           delta:  varint first index, then varint (gap - 1) for each next index
//           seeded: u64 seed; the decoder regenerates the k indices (randomk.h)
//   values  k x float32 (alone), or the payload of a quantizer of those k values (Pipeline)
// Bytes: 1 + len(varint k) + index bytes + 4k, where index bytes are 4k (int32),
// sum of varint lengths (delta; about 1.3 bytes per index at 1% density) or 8 (seeded).
//
// Thread-safety: as Compressor.
#include <string>
#include <string_view>
#include <vector>

#include "common/byte_io.h"
#include "compressors/compressor.h"
#include "compressors/compressor_config.h"
#include "compressors/selection.h"

namespace gradpress::compressors {

enum class IndexCoding : uint8_t { kInt32 = 0, kDelta = 1, kSeeded = 2 };

// Reads `index_coding: delta | int32` (default delta).
IndexCoding ReadIndexCoding(ParamReader& r);

class Sparsifier : public Compressor {
 public:
  // Chooses the elements to keep; sel arrives cleared.
  virtual void Select(const float* in, int64_t n, const StepContext& ctx, Selection* sel) = 0;
  // Writes the coding byte, k and the indices.
  virtual void WriteIndices(const Selection& sel, std::string* out) const;
  // Reads what WriteIndices wrote; validates range and order.
  virtual void ReadIndices(ByteReader& r, int64_t n, std::vector<int32_t>* indices) const;

  void EncodeTo(const float* in, int64_t n, const StepContext& ctx, std::string* out) override;
  void DecodeTo(std::string_view bytes, int64_t n, float* out) const override;
  bool IsSparse() const override { return true; }
  bool DecodeSparse(std::string_view bytes, int64_t n, std::vector<int32_t>* indices,
                    std::vector<float>* values) const override;

 protected:
  explicit Sparsifier(IndexCoding coding) : coding_(coding) {}
  IndexCoding coding_;
  Selection scratch_;  // reused across calls to avoid reallocating
};

// Zero-fills out[0..n) and writes values at indices (already validated).
void Scatter(const std::vector<int32_t>& indices, const float* values, int64_t n, float* out);

}  // namespace gradpress::compressors
