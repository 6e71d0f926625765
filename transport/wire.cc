#include "transport/wire.h"

#include <algorithm>

#include "common/error.h"
#include "transport/chunks.h"

namespace gradpress::transport {
namespace {

// Wire types of the protobuf encoding.
constexpr int kVarint = 0, kFixed64 = 1, kLen = 2, kFixed32 = 5;
// Field numbers from the generated code: PushMessage and PullMessage agree on them.
constexpr int kHeaderField = proto::PushMessage::kHeaderFieldNumber;
constexpr int kChunkField = proto::PushMessage::kChunkFieldNumber;
constexpr int kDataField = proto::TensorChunk::kDataFieldNumber;
static_assert(proto::PullMessage::kHeaderFieldNumber == kHeaderField &&
                  proto::PullMessage::kChunkFieldNumber == kChunkField,
              "PushMessage and PullMessage must number header and chunk alike");

void PutVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}

// Reads across the slices of a message; every read checks the end of the message.
class Cursor {
 public:
  explicit Cursor(const std::vector<grpc::Slice>& slices) : s_(slices) {
    for (const auto& s : s_) size_ += s.size();
    Normalize();
  }
  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  uint8_t Byte() {
    GP_ENFORCE(pos_ < size_, "malformed message: truncated");
    const uint8_t b = s_[si_].begin()[off_];
    Advance(1);
    return b;
  }
  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = Byte();
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    throw InvalidArgument("malformed message: varint longer than 10 bytes");
  }
  // Length of a length-delimited field, checked against `end`.
  size_t Length(size_t end) {
    const uint64_t len = Varint();
    GP_ENFORCE(pos_ <= end && len <= end - pos_, "malformed message: field of ", len,
               " bytes past the end");
    return static_cast<size_t>(len);
  }
  void Views(size_t n, std::vector<std::string_view>* out) {
    while (n > 0) {
      const size_t take = std::min(n, s_[si_].size() - off_);
      out->emplace_back(reinterpret_cast<const char*>(s_[si_].begin()) + off_, take);
      Advance(take);
      n -= take;
    }
  }
  void Copy(size_t n, std::string* out) {
    while (n > 0) {
      const size_t take = std::min(n, s_[si_].size() - off_);
      out->append(reinterpret_cast<const char*>(s_[si_].begin()) + off_, take);
      Advance(take);
      n -= take;
    }
  }

 private:
  void Advance(size_t n) {
    off_ += n;
    pos_ += n;
    Normalize();
  }
  void Normalize() {
    while (si_ < s_.size() && off_ == s_[si_].size()) ++si_, off_ = 0;
  }
  const std::vector<grpc::Slice>& s_;
  size_t si_ = 0, off_ = 0, pos_ = 0, size_ = 0;
};

// Copies one field's value (tag already read) of wire type `type` into `out`.
void CopyValue(Cursor& c, int type, size_t end, std::string* out) {
  switch (type) {
    case kVarint:
      PutVarint(c.Varint(), out);
      break;
    case kFixed64:
    case kFixed32: {
      const size_t n = type == kFixed64 ? 8 : 4;
      GP_ENFORCE(c.pos() <= end && n <= end - c.pos(), "malformed message: truncated");
      c.Copy(n, out);
      break;
    }
    case kLen: {
      const size_t len = c.Length(end);
      PutVarint(len, out);
      c.Copy(len, out);
      break;
    }
    default:
      throw InvalidArgument("malformed message: wire type " + std::to_string(type));
  }
  GP_ENFORCE(c.pos() <= end, "malformed message: field past the end");
}

void ParseChunk(Cursor& c, size_t end, WireMessage* out) {
  std::string meta;  // every field but data, re-encoded for protobuf to parse
  bool has_data = false;
  while (c.pos() < end) {
    const uint64_t tag = c.Varint();
    const int type = static_cast<int>(tag & 7);
    if ((tag >> 3) == kDataField && type == kLen) {
      GP_ENFORCE(!has_data, "malformed message: chunk has two data fields");
      has_data = true;
      const size_t len = c.Length(end);
      c.Views(len, &out->data);
      out->data_size = len;
      continue;
    }
    PutVarint(tag, &meta);
    CopyValue(c, type, end, &meta);
  }
  GP_ENFORCE(c.pos() == end, "malformed message: chunk past its length");
  GP_ENFORCE(out->chunk.ParseFromString(meta), "malformed message: bad chunk fields");
  out->has_chunk = true;
}

grpc::ByteBuffer Frame(const proto::TensorChunk& meta, size_t n, grpc::Slice data) {
  const std::string fields = meta.SerializeAsString();
  std::string prefix;
  prefix.push_back(static_cast<char>((kChunkField << 3) | kLen));
  PutVarint(fields.size() + 1 + VarintSize(n) + n, &prefix);
  prefix += fields;
  prefix.push_back(static_cast<char>((kDataField << 3) | kLen));
  PutVarint(n, &prefix);
  grpc::Slice slices[2] = {grpc::Slice(prefix), std::move(data)};
  return grpc::ByteBuffer(slices, n > 0 ? 2 : 1);
}

}  // namespace

void ParseMessage(grpc::ByteBuffer* buffer, WireMessage* out) {
  *out = WireMessage{};
  GP_ENFORCE(buffer->Dump(&out->slices).ok(), "malformed message: unreadable buffer");
  buffer->Clear();
  Cursor c(out->slices);
  while (c.pos() < c.size()) {
    const uint64_t tag = c.Varint();
    const int type = static_cast<int>(tag & 7);
    const uint64_t field = tag >> 3;
    if (type == kLen && (field == kHeaderField || field == kChunkField)) {
      GP_ENFORCE(!out->has_header && !out->has_chunk,
                 "malformed message: more than one header or chunk");
      const size_t len = c.Length(c.size());
      if (field == kHeaderField) {
        out->has_header = true;
        c.Copy(len, &out->header);
      } else {
        ParseChunk(c, c.pos() + len, out);
      }
      continue;
    }
    std::string ignored;  // an unknown field: skipped, as protobuf would
    CopyValue(c, type, c.size(), &ignored);
  }
}

grpc::ByteBuffer FrameChunk(const proto::TensorChunk& meta, const char* data, size_t n) {
  return Frame(meta, n, n > 0 ? grpc::Slice(data, n) : grpc::Slice());
}

grpc::ByteBuffer FrameChunk(const proto::TensorChunk& meta, const char* data, size_t n,
                            std::shared_ptr<const void> keep_alive) {
  if (n == 0) return Frame(meta, 0, grpc::Slice());
  auto* hold = new std::shared_ptr<const void>(std::move(keep_alive));
  grpc::Slice slice(
      const_cast<char*>(data), n,
      [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, hold);
  return Frame(meta, n, std::move(slice));
}

bool ForEachFrame(proto::TensorChunk meta, const char* data, size_t total,
                  const std::shared_ptr<const void>& keep_alive,
                  const std::function<bool(grpc::ByteBuffer)>& emit) {
  meta.set_total_bytes(total);
  size_t offset = 0;
  do {
    const size_t n = std::min(kChunkBytes, total - offset);
    meta.set_offset(offset);
    if (!emit(keep_alive ? FrameChunk(meta, data + offset, n, keep_alive)
                         : FrameChunk(meta, data + offset, n))) {
      return false;
    }
    offset += n;
  } while (offset < total);
  return true;
}

grpc::ByteBuffer FrameHeader(const google::protobuf::MessageLite& header) {
  std::string bytes;
  bytes.push_back(static_cast<char>((kHeaderField << 3) | kLen));
  const std::string fields = header.SerializeAsString();
  PutVarint(fields.size(), &bytes);
  bytes += fields;
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace gradpress::transport
