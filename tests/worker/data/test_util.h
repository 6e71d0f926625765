#pragma once
// Helpers for the data tests: a self-removing temp folder, writers of files (raw, gzip, or as
// the path's suffix says) and the message of an expected InvalidArgument. The generated
// datasets are in idx_files.h (IDX) and cifar_files.h (CIFAR-10 binary).
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "common/error.h"

namespace gradpress::worker::data::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gp_data_XXXXXX").string();
    GP_ENFORCE(mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed for ", tmpl);
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const {
    return (std::filesystem::path(path_) / name).string();
  }

 private:
  std::string path_;
};

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  GP_ENFORCE(out.good(), "cannot write ", path);
}

inline void WriteGz(const std::string& path, const std::string& bytes) {
  gzFile gz = gzopen(path.c_str(), "wb");
  GP_ENFORCE(gz != nullptr, "cannot open ", path);
  const int wrote = bytes.empty() ? 0 : gzwrite(gz, bytes.data(), bytes.size());
  GP_ENFORCE(wrote == static_cast<int>(bytes.size()), "gzwrite failed for ", path);
  GP_ENFORCE(gzclose(gz) == Z_OK, "gzclose failed for ", path);
}

// Raw when the path has no ".gz" suffix, gzip otherwise.
inline void WriteMaybeGz(const std::string& path, const std::string& bytes) {
  const bool gz = path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0;
  gz ? WriteGz(path, bytes) : WriteFile(path, bytes);
}

// The message of the InvalidArgument that f throws, or a marker when it throws none.
template <typename F>
std::string InvalidArgumentMessage(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "<no InvalidArgument thrown>";
}

}  // namespace gradpress::worker::data::testing
