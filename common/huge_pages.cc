#include "common/huge_pages.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace gradpress {

void UseHugePagesForLargeBuffers(char** argv) {
  if (std::getenv("GRADPRESS_NO_HUGEPAGES")) return;
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string current = tunables ? tunables : "";
  std::string add;
  if (current.find("glibc.malloc.hugetlb") == std::string::npos) {
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string mode((std::istreambuf_iterator<char>(thp)), std::istreambuf_iterator<char>());
    if (mode.find("[madvise]") != std::string::npos) add = "glibc.malloc.hugetlb=1";
  }
  if (current.find("glibc.malloc.arena_max") == std::string::npos) {
    add += (add.empty() ? "" : ":") + std::string("glibc.malloc.arena_max=1");
  }
  if (add.empty()) return;  // already set: this is the re-executed process
  const std::string value = current.empty() ? add : current + ":" + add;
  ::setenv("GLIBC_TUNABLES", value.c_str(), 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: carry on without
}

}  // namespace gradpress
