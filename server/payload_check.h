#pragma once
// PayloadCheck: the one validation of what the server takes from a worker -- a push, piece by
// piece as it streams in (parameter_store_push.cc), and weights (InitWeights, PublishWeights,
// through ModelState::Validate) -- so both are refused for the same reasons in the same
// words. A refusal is an InvalidArgument naming the key, with its Reason: kBadKeyOrShape
// (unknown, repeated or missing key, wrong shape), kUndecodable (unknown codec or dtype,
// sizes no codec produces, chunks out of order, bytes the codec refuses) or kNonFinite (NaN
// or Inf once decoded). The caller counts ReasonName(reason) and changes nothing.
//
//   PayloadCheck check(&model, /*sparse=*/true);
//   const size_t i = check.Index(piece.key);
//   check.Piece(i, piece, bytes.size(), &in);        // each piece, in order
//   if (in.raw) check.Raw(i, in.got, bytes, dst); else in.bytes.append(bytes);
//   in.got += bytes.size();
//   check.Complete(i, in);                           // all of it arrived
//   check.Decode(i, in.bytes, &in, dst);             // coded: sparse to in.idx/val, else to dst
// Thread-safety: const; Raw and Decode may run for different keys at once (the store's pool).
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "common/error.h"
#include "common/thread_pool.h"
#include "server/model_state.h"

namespace gradpress::server {

// A piece of one key's payload (ParameterStore::Piece).
struct PayloadPiece {
  std::string_view key, codec;
  std::vector<int64_t> shape;  // dense shape, as on every chunk of the key
  uint32_t dtype = 0;          // compressors::DType code
  uint64_t total_bytes = 0;    // the key's whole payload
  uint64_t offset = 0;         // of these bytes in the payload
};

// One key's payload while it arrives.
struct PayloadIn {
  bool started = false;
  bool raw = false;     // the float32 values themselves ("none"): checked as they arrive
  bool sparse = false;  // a sparse codec the caller adds from its indices and values
  std::string codec;
  std::vector<int64_t> shape;
  uint64_t total = 0, got = 0;  // bytes
  std::string bytes;            // a coded payload's, collected (streamed pushes)
  std::vector<int32_t> idx;     // a sparse payload, decoded
  std::vector<float> val;
};

class PayloadCheck {
 public:
  // sparse: sparse codecs decode to indices and values (sync pushes); else densely.
  PayloadCheck(ModelState* model, bool sparse) : model_(model), sparse_(sparse) {}

  // The model index of `key`; an unknown key is refused.
  size_t Index(std::string_view key) const;
  // Checks a piece of key i's n bytes against the model and the key's earlier pieces; the
  // first fixes codec, shape and size (in->raw, in->sparse). A key begun again is refused.
  void Piece(size_t i, const PayloadPiece& piece, size_t n, PayloadIn* in) const;
  // A raw payload's bytes at `offset`: copied to dst's bytes at offset and checked as they
  // land (a float split between pieces once whole). dst null: checked in place (whole floats).
  void Raw(size_t i, uint64_t offset, std::string_view bytes, float* dst) const;
  // Every key's payload arrived whole.
  void Complete(size_t i, const PayloadIn& in) const;
  // Decodes a coded payload and checks it: a sparse one into in->idx and in->val, else into
  // dst (numel floats; null: a scratch buffer, to check it only).
  void Decode(size_t i, std::string_view bytes, PayloadIn* in, float* dst) const;

 private:
  [[noreturn]] void Refuse(size_t i, Reason reason, const std::string& what) const;
  ModelState* model_;
  bool sparse_;
};

// Runs fn(j) for j in [0, n) on the pool (and the caller); once all ran, rethrows what the
// lowest j threw, so the error a client sees does not depend on thread timing.
void ForEachChecked(ThreadPool* pool, int64_t n, const std::function<void(int64_t)>& fn);

}  // namespace gradpress::server
