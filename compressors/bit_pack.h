#pragma once
// LSB-first bit packing for codec wire formats.
//
// Bit i of the stream is bit (i % 8) of byte (i / 8). Fields are written least significant
// bit first. A stream of B bits occupies ceil(B / 8) bytes; unused high bits of the last
// byte are zero, and readers reject a stream whose padding is not zero.
//
//   BitWriter w(dst, capacity_bytes);  w.Put(level, 5);  size_t used = w.Finish();
//   BitReader r(bytes, "qsgd");  uint32_t level = r.Get(5);  r.ExpectEnd();
//
// Put/Get take at most 32 bits at a time. Elias gamma codes a value v >= 1 as z = floor(log2 v)
// zero bits, a one bit, then the z low bits of v: 2z + 1 bits in all.
// Thread-safety: values; one per thread.
#include <cstdint>
#include <cstring>
#include <string_view>

#include "common/error.h"

namespace gradpress::compressors {

class BitWriter {
 public:
  // dst must have room for `capacity` bytes (the caller sizes it from the format's formula
  // or an upper bound).
  BitWriter(char* dst, size_t capacity) : dst_(dst), cap_(capacity) {}
  inline void Put(uint64_t value, int nbits) {
    acc_ |= value << fill_;
    fill_ += nbits;
    if (fill_ >= 32) {
      GP_ENFORCE_AS(Internal, pos_ + 4 <= cap_, "BitWriter overflow");
      const uint32_t word = static_cast<uint32_t>(acc_);
      std::memcpy(dst_ + pos_, &word, 4);
      pos_ += 4;
      acc_ >>= 32;
      fill_ -= 32;
    }
  }
  inline void PutGamma(uint32_t v) {  // v >= 1
    const int z = 31 - __builtin_clz(v);
    const uint64_t low = v & ((1u << z) - 1);
    const uint64_t code = (1ull | (low << 1)) << z;  // z zeros, a one, z low bits
    if (2 * z + 1 <= 32) {
      Put(code, 2 * z + 1);
    } else {
      Put(code & 0xFFFFFFFFull, 32);
      Put(code >> 32, 2 * z + 1 - 32);
    }
  }
  // Flushes the partial byte(s); returns the number of bytes written.
  size_t Finish() {
    while (fill_ > 0) {
      GP_ENFORCE_AS(Internal, pos_ < cap_, "BitWriter overflow");
      dst_[pos_++] = static_cast<char>(acc_ & 0xFF);
      acc_ >>= 8;
      fill_ = fill_ > 8 ? fill_ - 8 : 0;
    }
    return pos_;
  }

 private:
  char* dst_;
  size_t cap_;
  size_t pos_ = 0;
  uint64_t acc_ = 0;
  int fill_ = 0;
};

class BitReader {
 public:
  BitReader(std::string_view bytes, const char* context)
      : p_(reinterpret_cast<const uint8_t*>(bytes.data())),
        size_(bytes.size()),
        context_(context) {}

  inline uint32_t Get(int nbits) {
    if (avail_ < nbits) Refill(nbits);
    const uint32_t v = static_cast<uint32_t>(buf_ & ((1ull << nbits) - 1));
    buf_ >>= nbits;
    avail_ -= nbits;
    return v;
  }
  // The next nbits (<= 32) bits without consuming them (zero past the end of the stream).
  inline uint32_t Peek(int nbits) {
    if (avail_ < nbits) Load();
    return static_cast<uint32_t>(buf_ & ((1ull << nbits) - 1));
  }
  // Consumes n bits after a Peek that showed them; throws if the stream ended first.
  inline void Skip(int n) {
    GP_ENFORCE(n <= avail_, context_, ": bit stream truncated");
    buf_ >>= n;
    avail_ -= n;
  }
  inline uint32_t GetGamma() {
    if (avail_ < 33) Load();
    GP_ENFORCE(buf_ != 0, context_,
               avail_ >= 32 ? ": Elias-gamma code with more than 31 zero bits"
                            : ": truncated Elias-gamma code");
    const int z = __builtin_ctzll(buf_);
    GP_ENFORCE(z < avail_, context_, ": truncated Elias-gamma code");
    GP_ENFORCE(z <= 31, context_, ": Elias-gamma code with more than 31 zero bits");
    buf_ >>= z + 1;
    avail_ -= z + 1;
    const uint32_t low = z ? Get(z) : 0;
    return (1u << z) | low;
  }
  // Throws unless every byte was consumed and the padding bits are zero.
  void ExpectEnd() const {
    GP_ENFORCE(pos_ == size_ && avail_ < 8, context_, ": ", size_ - pos_ + avail_ / 8,
               " unexpected trailing bytes");
    GP_ENFORCE(buf_ == 0, context_, ": non-zero padding bits at the end of the bit stream");
  }

 private:
  // Loads whole bytes until at least 56 bits are buffered or the input ends.
  void Load() {
    if (pos_ + 8 <= size_) {
      uint64_t word;
      std::memcpy(&word, p_ + pos_, 8);
      buf_ |= word << avail_;  // bits past avail_ are the next bytes; reloaded later, same values
      pos_ += (63 - avail_) >> 3;
      avail_ |= 56;
    } else {
      while (avail_ <= 56 && pos_ < size_) {
        buf_ |= static_cast<uint64_t>(p_[pos_++]) << avail_;
        avail_ += 8;
      }
    }
  }
  void Refill(int need) {
    Load();
    GP_ENFORCE(avail_ >= need, context_, ": bit stream truncated (need ", need, " bits, have ",
               avail_, ")");
  }

  const uint8_t* p_;
  size_t size_;
  size_t pos_ = 0;
  uint64_t buf_ = 0;
  int avail_ = 0;
  const char* context_;
};

}  // namespace gradpress::compressors
