#pragma once
// The index coding logic of the device sparsifiers (sparse_coding.cu): delta varints as
// Sparsifier::WriteIndices/ReadIndices (sparsifier.cc) write and read them (the first index,
// then each gap - 1; decoding mirrors ByteReader::GetVarint's limits), and int32 index lists.
// Shared with the host twins in tests/compressors/cuda/ (sparsifier_logic_test.cc,
// sparsifier_decode_test.cc), which compare them with the CPU codecs byte for byte.
// Malformed index bytes are reported with decode_error.h's codes.
//
// Thread-safety: pure functions.
#include <cstdint>
#include <cstring>

#include "compressors/cuda/decode_error.h"
#include "compressors/cuda/device_logic.h"

namespace gradpress::compressors::cuda {

// ---- delta index coding ---------------------------------------------------------------------

// The varint written for index j (Sparsifier::WriteIndices): the first index itself, then
// the gap minus one.
GP_HD uint64_t DeltaGap(int32_t idx, int32_t prev_or_minus1) {
  return static_cast<uint64_t>(static_cast<int64_t>(idx) - prev_or_minus1 - 1);
}

// Reads a varint at p with `avail` bytes readable, as ByteReader::GetVarint does: returns its
// length (1..10) and sets *v; 0 when the bytes end before its last byte; -1 when it is longer
// than 10 bytes or overflows 64 bits.
GP_HD int ParseVarint(const uint8_t* p, int64_t avail, uint64_t* v) {
  uint64_t x = 0;
  for (int i = 0; i < 10; ++i) {
    if (i >= avail) return 0;
    const uint8_t b = p[i];
    const int shift = 7 * i;
    if (shift >= 63 && (b & 0x7E) != 0) return -1;
    x |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) {
      *v = x;
      return i + 1;
    }
  }
  return -1;
}

GP_HD bool IsVarintEnd(uint8_t b) { return b < 0x80; }

// Decoding varint j (its start found as the byte after the j-th terminator): the step its
// gap adds to the previous index (ReadIndices: pos = (j == 0 ? 0 : pos + 1) + gap), or -1 and
// *error set to a DecodeError when it is malformed or out of range for numel n.
GP_HD int64_t DeltaStep(const uint8_t* p, int64_t avail, int64_t j, int64_t n, int* error) {
  uint64_t gap = 0;
  const int len = ParseVarint(p, avail, &gap);
  if (len <= 0) {
    *error = len == 0 ? kIndexCount : kVarintTooLong;
    return -1;
  }
  if (gap >= static_cast<uint64_t>(n)) {
    *error = kGapOutOfRange;
    return -1;
  }
  return static_cast<int64_t>(gap) + (j > 0 ? 1 : 0);
}

// The byte length of the first k (> 0) varints at p[0..len): up to the k-th byte below 0x80,
// or -1 when the len bytes hold fewer than k. Host only (DeviceSparsifier::Decode finds where
// a quantizer's payload starts in the host copy of a payload): the ends of 128 bytes are
// counted together, eight byte lanes of a word at a time (no popcount instruction needed).
inline int64_t VarintsLength(const uint8_t* p, int64_t len, int64_t k) {
  constexpr uint64_t kHigh = 0x8080808080808080ULL;
  constexpr int64_t kBlock = 128;
  int64_t ends = 0, b = 0;
  for (; b + kBlock <= len; b += kBlock) {
    uint64_t lanes = 0;  // per byte lane, the ends among the block's 16 words (<= 16 each)
    for (int64_t at = 0; at < kBlock; at += 8) {
      uint64_t w = 0;
      std::memcpy(&w, p + b + at, sizeof(w));
      lanes += (~w & kHigh) >> 7;
    }
    const auto c = static_cast<int64_t>((lanes * 0x0101010101010101ULL) >> 56);  // <= 128
    if (ends + c >= k) break;
    ends += c;
  }
  for (; b < len; ++b)
    if (IsVarintEnd(p[b]) && ++ends == k) return b + 1;
  return -1;
}

// ---- int32 index coding -----------------------------------------------------------------------

// Checks index j of an int32 list at p (4 bytes each, any alignment) against numel n and its
// predecessor: kDecodeOk, kIndexOutOfRange or kIndexOrder; *idx receives the index.
GP_HD int CheckInt32Index(const uint8_t* p, int64_t j, int64_t n, int32_t* idx) {
  const auto v = static_cast<int32_t>(LoadU32(p + 4 * j));
  *idx = v;
  if (v < 0 || v >= n) return kIndexOutOfRange;
  if (j > 0 && v <= static_cast<int32_t>(LoadU32(p + 4 * (j - 1)))) return kIndexOrder;
  return kDecodeOk;
}

}  // namespace gradpress::compressors::cuda
