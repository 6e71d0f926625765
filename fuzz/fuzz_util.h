#pragma once
// Shared pieces of the libFuzzer targets (fuzz/*_fuzz.cc): reading a fuzz input as
// length-prefixed records and writing a seed corpus of valid inputs made by the project's own
// encoders.
//
//   FuzzInput in(data, size);  uint8_t mode = in.Byte();
//   while (auto r = in.Next()) ...;        // [u16 length, little-endian][bytes]
//   Seeds seeds(argc, argv);  if (seeds) { seeds.Write("name", bytes); ... seeds.Done(); }
//
// Every target accepts `--write-seeds=DIR` (handled in LLVMFuzzerInitialize, before libFuzzer
// parses its flags): it writes its seeds into DIR and exits 0.
// Thread-safety: values.
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gradpress::fuzz {

// Consumes a fuzz input front to back; reads past the end yield zeros / empty records.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size)
      : p_(reinterpret_cast<const char*>(data)), left_(size) {}
  uint8_t Byte() {
    if (left_ == 0) return 0;
    --left_;
    return static_cast<uint8_t>(*p_++);
  }
  uint16_t U16() { return static_cast<uint16_t>(Byte() | (Byte() << 8)); }
  // A record: [u16 length][length bytes] (clipped at the end of the input). kBoundary as
  // the length marks a stream boundary and returns an empty record with boundary set.
  static constexpr uint16_t kBoundary = 0xFFFF;
  struct Record {
    std::string_view bytes;
    bool boundary = false;
  };
  std::optional<Record> Next() {
    if (left_ < 2) return std::nullopt;
    const uint16_t len = U16();
    if (len == kBoundary) return Record{{}, true};
    const size_t n = len < left_ ? len : left_;
    Record r{std::string_view(p_, n), false};
    p_ += n;
    left_ -= n;
    return r;
  }
  std::string_view Rest() {
    std::string_view r(p_, left_);
    p_ += left_;
    left_ = 0;
    return r;
  }
  size_t left() const { return left_; }

 private:
  const char* p_;
  size_t left_;
};

// Appends a record to a seed being built.
inline void PutRecord(std::string_view bytes, std::string* out) {
  const size_t n = bytes.size();
  if (n >= FuzzInput::kBoundary) std::abort();  // seeds are built small
  out->push_back(static_cast<char>(n & 0xFF));
  out->push_back(static_cast<char>(n >> 8));
  out->append(bytes);
}
inline void PutBoundary(std::string* out) { out->append("\xFF\xFF", 2); }
inline void PutU16(uint16_t v, std::string* out) {
  out->push_back(static_cast<char>(v & 0xFF));
  out->push_back(static_cast<char>(v >> 8));
}

// `--write-seeds=DIR` among argv: Write() puts files there; Done() exits.
class Seeds {
 public:
  Seeds(int* argc, char*** argv) {
    constexpr std::string_view kFlag = "--write-seeds=";
    for (int i = 1; i < *argc; ++i) {
      std::string_view a = (*argv)[i];
      if (a.substr(0, kFlag.size()) == kFlag) dir_ = std::string(a.substr(kFlag.size()));
    }
  }
  explicit operator bool() const { return !dir_.empty(); }
  void Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f || std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() || std::fclose(f)) {
      std::fprintf(stderr, "cannot write seed %s\n", path.c_str());
      std::exit(1);
    }
    ++count_;
  }
  [[noreturn]] void Done() {
    std::fprintf(stderr, "wrote %d seeds into %s\n", count_, dir_.c_str());
    std::exit(0);
  }

 private:
  std::string dir_;
  int count_ = 0;
};

// No log lines per input: they would drown the fuzzer's output and slow it down.
inline void Quiet() { spdlog::set_level(spdlog::level::off); }

// LLVMFuzzerInitialize's shared part: no log lines; with --write-seeds=DIR, write_seeds fills
// the corpus and the process exits.
inline void Initialize(int* argc, char*** argv, void (*write_seeds)(Seeds&)) {
  Quiet();
  Seeds seeds(argc, argv);
  if (seeds) {
    write_seeds(seeds);
    seeds.Done();
  }
}

// Product of dims, or -1 for a negative dim or more than int64 holds (the store's NumelOf
// lives behind LibTorch's headers, which the fuzz targets keep out).
inline int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && n > INT64_MAX / d)) return -1;
    n *= d;
  }
  return n;
}

// Deterministic test data: n floats in [-1, 1) from a seed.
inline std::vector<float> Floats(int64_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t x = seed * 2654435761u + 1;
  for (auto& f : v) {
    x = x * 1664525u + 1013904223u;
    f = static_cast<float>(x >> 8) / static_cast<float>(1 << 23) - 1.f;
  }
  return v;
}

}  // namespace gradpress::fuzz
