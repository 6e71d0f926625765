#include "server/payload_check.h"

#include <algorithm>
#include <cstring>
#include <exception>

#include "common/shape.h"

namespace gradpress::server {

namespace {

// A dense decode that is only checked, not kept (weights are decoded again once all passed).
float* Scratch(int64_t n) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < n) scratch.resize(n);
  return scratch.data();
}

}  // namespace

void PayloadCheck::Refuse(size_t i, Reason reason, const std::string& what) const {
  throw InvalidArgument("key '" + model_->spec(i).key + "': " + what, reason);
}

size_t PayloadCheck::Index(std::string_view key) const {
  const int64_t i = model_->Index(std::string(key));
  if (i < 0)
    throw InvalidArgument("unknown key '" + std::string(key) + "'", Reason::kBadKeyOrShape);
  return static_cast<size_t>(i);
}

void PayloadCheck::Piece(size_t i, const PayloadPiece& piece, size_t n, PayloadIn* in) const {
  const TensorSpec& spec = model_->spec(i);
  const int64_t numel = model_->key(i).numel;
  if (!in->started) {
    if (piece.shape != spec.shape) {
      Refuse(i, Reason::kBadKeyOrShape,
             "shape " + ShapeToString(piece.shape) + " does not match the model's " +
                 ShapeToString(spec.shape));
    }
    if (piece.offset != 0)
      Refuse(i, Reason::kUndecodable, "first chunk at offset " + std::to_string(piece.offset));
    if (piece.dtype > static_cast<uint32_t>(compressors::DType::kFloat64))
      Refuse(i, Reason::kUndecodable, "unknown dtype code " + std::to_string(piece.dtype));
    if (piece.total_bytes > 8 * static_cast<uint64_t>(numel) + 4096) {
      Refuse(i, Reason::kUndecodable,
             "payload of " + std::to_string(piece.total_bytes) +
                 " bytes is larger than any codec produces");
    }
    try {
      const compressors::Compressor& d = model_->Decoder(std::string(piece.codec));
      in->raw = d.IsLossless();
      in->sparse = sparse_ && d.IsSparse();
    } catch (const Error& e) {
      Refuse(i, Reason::kUndecodable, "payload does not decode: " + e.message());
    }
    in->codec = std::string(piece.codec);
    in->shape = piece.shape;
    in->total = piece.total_bytes;
    if (in->raw && in->total != static_cast<uint64_t>(numel) * sizeof(float)) {
      Refuse(i, Reason::kUndecodable,
             "payload does not decode: " + in->codec + ": " + std::to_string(in->total) +
                 " bytes, expected " + std::to_string(numel * sizeof(float)));
    }
    in->started = true;
  } else if (piece.offset == 0 && (in->got > 0 || in->total == 0)) {
    throw InvalidArgument("key '" + spec.key + "' pushed twice", Reason::kBadKeyOrShape);
  } else if (piece.codec != in->codec || piece.shape != in->shape ||
             piece.total_bytes != in->total) {
    Refuse(i, Reason::kUndecodable, "chunk disagrees with the key's first chunk");
  }
  if (piece.offset != in->got) {
    Refuse(i, Reason::kUndecodable,
           "chunk at offset " + std::to_string(piece.offset) + ", expected " +
               std::to_string(in->got));
  }
  if (n > in->total - in->got)
    Refuse(i, Reason::kUndecodable, "chunks exceed total_bytes " + std::to_string(in->total));
}

void PayloadCheck::Raw(size_t i, uint64_t offset, std::string_view bytes, float* dst) const {
  auto non_finite = [&](int64_t at) {
    Refuse(i, Reason::kNonFinite,
           "decoded gradient has NaN or Inf at element " + std::to_string(at));
  };
  // Floats before `checked` were checked with the earlier pieces; copied and checked in
  // blocks, each while still in cache.
  int64_t checked = static_cast<int64_t>(offset / sizeof(float));
  if (dst == nullptr) {  // whole floats, read through an aligned block
    float block[4096];
    for (size_t done = 0; done < bytes.size();) {
      const size_t len = std::min(bytes.size() - done, sizeof(block));
      std::memcpy(block, bytes.data() + done, len);
      const int64_t at = ModelState::FirstNonFinite(block, len / sizeof(float));
      if (at >= 0) non_finite(checked + at);
      checked += len / sizeof(float);
      done += len;
    }
    return;
  }
  char* out = reinterpret_cast<char*>(dst);
  for (size_t done = 0; done < bytes.size();) {
    const size_t len = std::min<size_t>(bytes.size() - done, 64 << 10);
    std::memcpy(out + offset + done, bytes.data() + done, len);
    done += len;
    const int64_t upto = static_cast<int64_t>((offset + done) / sizeof(float));
    const int64_t at = ModelState::FirstNonFinite(dst + checked, upto - checked);
    if (at >= 0) non_finite(checked + at);
    checked = upto;
  }
}

void PayloadCheck::Complete(size_t i, const PayloadIn& in) const {
  if (!in.started) {
    throw InvalidArgument("push is missing key '" + model_->spec(i).key + "'",
                          Reason::kBadKeyOrShape);
  }
  if (in.got != in.total) {
    Refuse(i, Reason::kUndecodable,
           "got " + std::to_string(in.got) + " of " + std::to_string(in.total) + " payload bytes");
  }
}

void PayloadCheck::Decode(size_t i, std::string_view bytes, PayloadIn* in, float* dst) const {
  const int64_t numel = model_->key(i).numel;
  int64_t at = -1;
  try {
    const compressors::Compressor& d = model_->Decoder(in->codec);
    if (in->sparse) {
      d.DecodeSparse(bytes, numel, &in->idx, &in->val);
      // The dense decode is finite where nothing was kept: the values are all to check.
      at = ModelState::FirstNonFinite(in->val.data(), static_cast<int64_t>(in->val.size()));
      if (at >= 0) at = in->idx[at];
    } else {
      float* out = dst != nullptr ? dst : Scratch(numel);
      d.DecodeTo(bytes, numel, out);
      at = ModelState::FirstNonFinite(out, numel);
    }
  } catch (const Error& e) {
    Refuse(i, Reason::kUndecodable, "payload does not decode: " + e.message());
  }
  if (at >= 0)
    Refuse(i, Reason::kNonFinite,
           "decoded gradient has NaN or Inf at element " + std::to_string(at));
}

void ForEachChecked(ThreadPool* pool, int64_t n, const std::function<void(int64_t)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  pool->ParallelFor(n, [&](int64_t j) {
    try {
      fn(j);
    } catch (...) {
      errors[j] = std::current_exception();
    }
  });
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace gradpress::server
