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

void ParseChunk(Cursor& c, size_t end, WireChunk* out) {
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
}

// Appends a chunk field (meta, then data = `data` of n bytes) to a message's slices.
void AppendChunk(const proto::TensorChunk& meta, size_t n, grpc::Slice data,
                 std::vector<grpc::Slice>* slices) {
  const std::string fields = meta.SerializeAsString();
  std::string prefix;
  prefix.push_back(static_cast<char>((kChunkField << 3) | kLen));
  PutVarint(fields.size() + 1 + VarintSize(n) + n, &prefix);
  prefix += fields;
  prefix.push_back(static_cast<char>((kDataField << 3) | kLen));
  PutVarint(n, &prefix);
  slices->emplace_back(prefix);
  if (n > 0) slices->push_back(std::move(data));
}

// A slice of [data, data + n): referring to it (holding keep_alive) or a copy.
grpc::Slice DataSlice(const char* data, size_t n, const std::shared_ptr<const void>& keep_alive) {
  if (n == 0) return grpc::Slice();
  if (!keep_alive) return grpc::Slice(data, n);
  auto* hold = new std::shared_ptr<const void>(keep_alive);
  return grpc::Slice(
      const_cast<char*>(data), n,
      [](void* p) { delete static_cast<std::shared_ptr<const void>*>(p); }, hold);
}

std::string HeaderField(const google::protobuf::MessageLite& header) {
  std::string bytes;
  bytes.push_back(static_cast<char>((kHeaderField << 3) | kLen));
  const std::string fields = header.SerializeAsString();
  PutVarint(fields.size(), &bytes);
  bytes += fields;
  return bytes;
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
    if (type == kLen && field == kHeaderField) {
      GP_ENFORCE(!out->has_header, "malformed message: more than one header");
      out->has_header = true;
      c.Copy(c.Length(c.size()), &out->header);
      continue;
    }
    if (type == kLen && field == kChunkField) {
      const size_t len = c.Length(c.size());
      ParseChunk(c, c.pos() + len, &out->chunks.emplace_back());
      continue;
    }
    std::string ignored;  // an unknown field: skipped, as protobuf would
    CopyValue(c, type, c.size(), &ignored);
  }
}

void ForEachChunk(WireMessage* first, const std::function<bool(grpc::ByteBuffer*)>& read,
                  const std::function<void(const WireChunk&)>& chunk, const char* what) {
  WireMessage& m = *first;
  grpc::ByteBuffer buffer;
  for (;;) {
    for (const WireChunk& c : m.chunks) chunk(c);
    if (!read(&buffer)) return;
    ParseMessage(&buffer, &m);
    GP_ENFORCE(!m.has_header, what, " stream has a second header");
  }
}

void MessageWriter::Header(const google::protobuf::MessageLite& header) {
  slices_.emplace_back(HeaderField(header));
}

bool MessageWriter::Payload(proto::TensorChunk meta, const char* data, size_t total,
                            const std::shared_ptr<const void>& keep_alive) {
  if (failed_) return false;
  meta.set_total_bytes(total);
  size_t offset = 0;
  do {
    const size_t n = std::min(kChunkBytes, total - offset);
    if (data_bytes_ > 0 && data_bytes_ + n > kChunkBytes && !Flush()) return false;
    meta.set_offset(offset);
    AppendChunk(meta, n, DataSlice(data + offset, n, keep_alive), &slices_);
    data_bytes_ += n;
    offset += n;
    if (data_bytes_ >= kChunkBytes && !Flush()) return false;
  } while (offset < total);
  return true;
}

bool MessageWriter::Flush() {
  if (failed_) return false;
  if (slices_.empty()) return true;
  grpc::ByteBuffer b(slices_.data(), slices_.size());
  slices_.clear();
  data_bytes_ = 0;
  failed_ = !emit_(std::move(b));
  return !failed_;
}

grpc::ByteBuffer FrameChunk(const proto::TensorChunk& meta, const char* data, size_t n) {
  std::vector<grpc::Slice> slices;
  AppendChunk(meta, n, DataSlice(data, n, nullptr), &slices);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

grpc::ByteBuffer FrameHeader(const google::protobuf::MessageLite& header) {
  grpc::Slice slice(HeaderField(header));
  return grpc::ByteBuffer(&slice, 1);
}

}  // namespace gradpress::transport
