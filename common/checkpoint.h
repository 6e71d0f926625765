#pragma once
// Checkpoint files: named byte sections with a CRC, written so that a crash never leaves a
// partial file where a reader would look (shared/DESIGN.md, "Reliability rules").
//
//   Checkpoint c;  c.step = 100;  c.Put("meta", bytes);  c.Put("key/conv1.weight", floats);
//   SaveCheckpoint("runs/x/ckpt/server", c, /*keep=*/3);   // step-000000000100.ckpt + latest
//   std::optional<Checkpoint> r = LoadLatestCheckpoint("runs/x/ckpt/server");
//
// File format (little endian): magic "GPCKPT01", uint64 step, varint section count, then per
// section varint name length, name, uint64 data length, data; last a uint32 CRC-32 (zlib) of
// every byte before it. A file is written to "<name>.tmp", fsynced, renamed, the directory
// fsynced; then `latest` (one line: the file name) is replaced the same way, and all but the
// newest `keep` checkpoints are removed. Readers check magic, lengths and CRC; a corrupt or
// truncated newest file is skipped with a warning and the previous one is used.
// Thread-safety: free functions; one writer per directory.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gradpress {

struct Checkpoint {
  int64_t step = 0;
  std::string path;  // set by the readers: the file it came from

  void Put(const std::string& name, std::string bytes) { sections[name] = std::move(bytes); }
  bool Has(const std::string& name) const { return sections.count(name) > 0; }
  // The section's bytes; InvalidArgument naming the file and the section if absent.
  const std::string& Get(const std::string& name) const;

  std::map<std::string, std::string> sections;
};

// Writes dir/step-<step>.ckpt (creating dir) and points dir/latest at it; returns the path.
// Throws Unavailable naming the path when the file system refuses (disk full, permissions).
std::string SaveCheckpoint(const std::string& dir, const Checkpoint& ckpt, int keep = 3);

// Reads and verifies one file; InvalidArgument naming the file and what was wrong.
Checkpoint ReadCheckpoint(const std::string& path);

// The checkpoint files in dir, newest step first (empty if dir does not exist).
std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir);

// The newest valid checkpoint whose step `accept`s (all if empty): the file `latest` names
// first, then the others by step, newest first; unreadable ones are skipped with a warning.
std::optional<Checkpoint> LoadLatestCheckpoint(const std::string& dir,
                                               const std::function<bool(int64_t)>& accept = {});

// Float vectors <-> section bytes (raw little-endian float32).
std::string FloatBytes(const float* data, size_t n);
std::vector<float> BytesToFloats(std::string_view bytes, const std::string& what);

}  // namespace gradpress
