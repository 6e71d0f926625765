#pragma once
// A fresh directory for a test, removed with everything in it when the test ends.
//
//   TempDir dir;                                    // /tmp/gp-test-XXXXXX, made by mkdtemp
//   std::ofstream(dir.path + "/config.yaml") << ...;
//
// Thread-safety: a value of the test's main thread.
#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace gradpress::testing {

struct TempDir {
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "gp-test-XXXXXX").string();
    if (mkdtemp(t.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + t);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path;
};

}  // namespace gradpress::testing
