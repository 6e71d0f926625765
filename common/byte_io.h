#pragma once
// Little-endian byte writer and bounds-checked reader for wire formats.
//
//   std::string out; ByteWriter w(&out); w.Put<uint32_t>(k); w.PutVarint(gap);
//   ByteReader r(bytes, "qsgd"); auto k = r.Get<uint32_t>("k"); r.ExpectEnd();
//
// Every ByteReader getter checks the remaining length first and throws
// gradpress::InvalidArgument naming the context and the field, so a truncated or
// malformed payload can never read out of bounds. Varints are LEB128 (7 bits per byte,
// low group first, at most 10 bytes for a uint64).
// Thread-safety: values; one per thread.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

#include "common/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "gradpress wire formats are little-endian");

namespace gradpress {

class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_->append(reinterpret_cast<const char*>(&v), sizeof(T));
  }
  void PutBytes(const void* data, size_t n) { out_->append(static_cast<const char*>(data), n); }
  void PutVarint(uint64_t v) {
    char buf[10];
    int n = 0;
    while (v >= 0x80) {
      buf[n++] = static_cast<char>((v & 0x7F) | 0x80);
      v >>= 7;
    }
    buf[n++] = static_cast<char>(v);
    out_->append(buf, n);
  }
  // Grows the output by n bytes and returns where they start (for encoders that fill in place).
  char* Extend(size_t n) {
    const size_t old = out_->size();
    out_->resize(old + n);
    return out_->data() + old;
  }
  std::string* out() { return out_; }

 private:
  std::string* out_;
};

class ByteReader {
 public:
  ByteReader(std::string_view bytes, const char* context) : data_(bytes), context_(context) {}

  template <typename T>
  T Get(const char* field) {
    static_assert(std::is_trivially_copyable_v<T>);
    Need(sizeof(T), field);
    T v;
    std::memcpy(&v, data_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  uint64_t GetVarint(const char* field) {
    if (pos_ < data_.size() && !(data_[pos_] & 0x80))  // one byte: a value below 128
      return static_cast<uint8_t>(data_[pos_++]);
    uint64_t v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      Need(1, field);
      const auto b = static_cast<uint8_t>(data_[pos_++]);
      GP_ENFORCE(shift < 63 || (b & 0x7E) == 0, context_, ": varint ", field, " overflows 64 bits");
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    throw InvalidArgument(std::string(context_) + ": varint " + field + " is too long");
  }
  // Returns a view of the next n bytes and advances past them.
  std::string_view GetBytes(size_t n, const char* field) {
    Need(n, field);
    std::string_view v = data_.substr(pos_, n);
    pos_ += n;
    return v;
  }
  std::string_view Rest() {
    std::string_view v = data_.substr(pos_);
    pos_ = data_.size();
    return v;
  }
  size_t remaining() const { return data_.size() - pos_; }
  size_t position() const { return pos_; }
  void ExpectEnd() const {
    GP_ENFORCE(pos_ == data_.size(), context_, ": ", data_.size() - pos_,
               " unexpected trailing bytes after ", pos_, " bytes");
  }
  void Need(size_t n, const char* field) const {
    GP_ENFORCE(n <= data_.size() - pos_, context_, ": truncated at ", field, " (need ", n,
               " bytes at offset ", pos_, ", have ", data_.size() - pos_, ")");
  }
  const char* context() const { return context_; }

 private:
  std::string_view data_;
  size_t pos_ = 0;
  const char* context_;
};

}  // namespace gradpress
