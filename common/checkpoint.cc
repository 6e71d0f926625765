#include "common/checkpoint.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/byte_io.h"
#include "common/error.h"

namespace gradpress {
namespace {

namespace fs = std::filesystem;
constexpr char kMagic[] = "GPCKPT01";
constexpr size_t kMagicSize = 8;

uint32_t Crc32(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  size_t done = 0;
  while (done < bytes.size()) {  // zlib takes uInt lengths
    const size_t n = std::min<size_t>(bytes.size() - done, 1u << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), static_cast<uInt>(n));
    done += n;
  }
  return static_cast<uint32_t>(crc);
}

std::string FileName(int64_t step) {
  char name[64];
  std::snprintf(name, sizeof(name), "step-%012lld.ckpt", static_cast<long long>(step));
  return name;
}

// Parses "step-<digits>.ckpt"; -1 otherwise.
int64_t StepOf(const std::string& name) {
  const std::string prefix = "step-", suffix = ".ckpt";
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits =
      name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 18 ||
      !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}

void FsyncPath(const std::string& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return;  // best effort for directories on file systems that refuse
  ::fsync(fd);
  ::close(fd);
}

// tmp file, write all, fsync, rename over `path`, fsync the directory.
void WriteAtomically(const std::string& path, std::string_view bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  GP_ENFORCE_AS(Unavailable, fd >= 0, "cannot create ", tmp, ": ", std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw Unavailable("cannot write " + tmp + ": " + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!synced) {
    ::unlink(tmp.c_str());
    throw Unavailable("cannot fsync " + tmp + ": " + std::strerror(err));
  }
  GP_ENFORCE_AS(Unavailable, ::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp,
                " to ", path, ": ", std::strerror(errno));
  FsyncPath(fs::path(path).parent_path().string(), O_RDONLY | O_DIRECTORY);
}

}  // namespace

const std::string& Checkpoint::Get(const std::string& name) const {
  auto it = sections.find(name);
  GP_ENFORCE(it != sections.end(), "checkpoint ", path.empty() ? "<memory>" : path,
             " has no section '", name, "'");
  return it->second;
}

std::string SaveCheckpoint(const std::string& dir, const Checkpoint& ckpt, int keep) {
  GP_ENFORCE(ckpt.step >= 0, "checkpoint step must be >= 0, got ", ckpt.step);
  std::error_code ec;
  fs::create_directories(dir, ec);
  GP_ENFORCE_AS(Unavailable, !ec, "cannot create checkpoint directory ", dir, ": ", ec.message());
  size_t total = kMagicSize + 16;
  for (const auto& [name, data] : ckpt.sections) total += name.size() + data.size() + 20;
  std::string bytes;
  bytes.reserve(total + 4);
  ByteWriter w(&bytes);
  w.PutBytes(kMagic, kMagicSize);
  w.Put<uint64_t>(static_cast<uint64_t>(ckpt.step));
  w.PutVarint(ckpt.sections.size());
  for (const auto& [name, data] : ckpt.sections) {
    w.PutVarint(name.size());
    w.PutBytes(name.data(), name.size());
    w.Put<uint64_t>(data.size());
    w.PutBytes(data.data(), data.size());
  }
  w.Put<uint32_t>(Crc32(bytes));
  const std::string name = FileName(ckpt.step);
  const std::string path = (fs::path(dir) / name).string();
  WriteAtomically(path, bytes);
  WriteAtomically((fs::path(dir) / "latest").string(), name + "\n");
  const auto all = ListCheckpoints(dir);
  for (size_t i = std::max(1, keep); i < all.size(); ++i) fs::remove(all[i].second, ec);
  return path;
}

Checkpoint ReadCheckpoint(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  GP_ENFORCE_AS(NotFound, f.good(), "cannot open checkpoint ", path);
  std::ostringstream buffer;
  buffer << f.rdbuf();
  const std::string bytes = buffer.str();
  GP_ENFORCE(bytes.size() >= kMagicSize + 8 + 1 + 4, "checkpoint ", path, ": ", bytes.size(),
             " bytes is too short to be a checkpoint (truncated?)");
  GP_ENFORCE(std::memcmp(bytes.data(), kMagic, kMagicSize) == 0, "checkpoint ", path,
             ": not a gradpress checkpoint (magic bytes differ)");
  const std::string_view body(bytes.data(), bytes.size() - 4);
  uint32_t stored;
  std::memcpy(&stored, bytes.data() + body.size(), 4);
  GP_ENFORCE(stored == Crc32(body), "checkpoint ", path,
             ": CRC mismatch (the file is truncated or corrupt)");
  const std::string context = "checkpoint " + path;
  ByteReader r(body.substr(kMagicSize), context.c_str());
  Checkpoint c;
  c.path = path;
  c.step = static_cast<int64_t>(r.Get<uint64_t>("step"));
  const uint64_t count = r.GetVarint("section count");
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t name_len = r.GetVarint("section name length");
    GP_ENFORCE(name_len <= r.remaining(), context, ": section name of ", name_len, " bytes");
    std::string name(r.GetBytes(name_len, "section name"));
    const uint64_t len = r.Get<uint64_t>("section length");
    GP_ENFORCE(len <= r.remaining(), context, ": section '", name, "' claims ", len, " bytes, ",
               r.remaining(), " left");
    c.sections[name] = std::string(r.GetBytes(len, "section data"));
  }
  r.ExpectEnd();
  return c;
}

std::vector<std::pair<int64_t, std::string>> ListCheckpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return out;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t step = StepOf(entry.path().filename().string());
    if (step >= 0 && entry.is_regular_file(ec)) out.emplace_back(step, entry.path().string());
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

std::optional<Checkpoint> LoadLatestCheckpoint(const std::string& dir,
                                               const std::function<bool(int64_t)>& accept) {
  std::vector<std::string> order;
  {
    std::ifstream latest(fs::path(dir) / "latest");
    std::string name;
    if (latest && std::getline(latest, name) && StepOf(name) >= 0)
      order.push_back((fs::path(dir) / name).string());
  }
  for (const auto& [step, path] : ListCheckpoints(dir))
    if (std::find(order.begin(), order.end(), path) == order.end()) order.push_back(path);
  for (const auto& path : order) {
    const int64_t step = StepOf(fs::path(path).filename().string());
    if (accept && !accept(step)) continue;
    try {
      Checkpoint c = ReadCheckpoint(path);
      GP_ENFORCE(c.step == step, "checkpoint ", path, " holds step ", c.step);
      return c;
    } catch (const Error& e) {
      spdlog::warn("skipping unreadable checkpoint: {}", e.what());
    }
  }
  return std::nullopt;
}

std::string FloatBytes(const float* data, size_t n) {
  return std::string(reinterpret_cast<const char*>(data), n * sizeof(float));
}

std::vector<float> BytesToFloats(std::string_view bytes, const std::string& what) {
  GP_ENFORCE(bytes.size() % sizeof(float) == 0, what, ": ", bytes.size(),
             " bytes is not a whole number of floats");
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

}  // namespace gradpress
