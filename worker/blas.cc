#include "worker/blas.h"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <link.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <vector>

namespace gradpress::worker {
namespace {

// The loaded objects whose file name says BLAS, in load order.
int CollectBlas(dl_phdr_info* info, size_t /*size*/, void* data) {
  if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') return 0;
  const std::string path = info->dlpi_name;
  const std::string base = std::filesystem::path(path).filename().string();
  for (const char* prefix : {"libblas.so", "libopenblas", "libblis", "libmkl_rt"}) {
    if (base.rfind(prefix, 0) == 0) {
      static_cast<std::vector<std::string>*>(data)->push_back(path);
      break;
    }
  }
  return 0;
}

// A symbol of an already loaded library (and its dependencies); nullptr if absent.
void* Find(void* handle, const char* symbol) { return handle ? dlsym(handle, symbol) : nullptr; }

std::string Resolved(const std::string& path) {
  std::error_code ec;
  const auto p = std::filesystem::canonical(path, ec);
  return ec ? path : p.string();
}

}  // namespace

std::string BlasInfo::ToString() const {
  switch (kind) {
    case Kind::kNone:
      return "no separate BLAS library loaded";
    case Kind::kReference:
      return "the reference BLAS (Netlib, unoptimized) from " + library;
    default:
      break;
  }
  std::string s = name + " from " + library;
  if (threads > 0) s += ", " + std::to_string(threads) + " thread" + (threads == 1 ? "" : "s");
  return s;
}

BlasInfo DescribeBlas() {
  std::vector<std::string> found;
  dl_iterate_phdr(CollectBlas, &found);
  BlasInfo info;
  if (found.empty()) return info;
  // LibTorch links the generic libblas.so.3; prefer it over a library it pulls in.
  const auto generic = std::find_if(found.begin(), found.end(), [](const std::string& p) {
    return std::filesystem::path(p).filename().string().rfind("libblas.so", 0) == 0;
  });
  const std::string path = generic != found.end() ? *generic : found.front();
  info.library = Resolved(path);
  void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  using ConfigFn = char* (*)();
  using IntFn = int (*)();
  if (auto config = reinterpret_cast<ConfigFn>(Find(h, "openblas_get_config"))) {
    info.kind = BlasInfo::Kind::kOpenBlas;
    info.name = config();
    if (info.name.rfind("OpenBLAS", 0) != 0) info.name = "OpenBLAS " + info.name;
    if (auto parallel = reinterpret_cast<IntFn>(Find(h, "openblas_get_parallel"))) {
      const int mode = parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
      info.name += mode == 2 ? " (OpenMP)" : mode == 1 ? " (pthreads)" : " (sequential)";
    }
    if (auto n = reinterpret_cast<IntFn>(Find(h, "openblas_get_num_threads"))) info.threads = n();
  } else if (auto version =
                 reinterpret_cast<const char* (*)()>(Find(h, "bli_info_get_version_str"))) {
    info.kind = BlasInfo::Kind::kBlis;
    info.name = std::string("BLIS ") + version();
    if (auto n = reinterpret_cast<IntFn>(Find(h, "bli_thread_get_num_threads"))) info.threads = n();
  } else if (Find(h, "MKL_Get_Max_Threads") != nullptr) {
    info.kind = BlasInfo::Kind::kMkl;
    info.name = "Intel MKL";
  } else {
    // A libblas.so.3 with none of the optimized libraries' entry points: Debian's libblas3
    // (/usr/lib/<arch>/blas/) is the reference implementation; anything else is unrecognised.
    const bool netlib = info.library.find("/blas/") != std::string::npos;
    info.kind = netlib ? BlasInfo::Kind::kReference : BlasInfo::Kind::kUnknown;
    info.name = netlib ? "reference BLAS" : "an unrecognised BLAS";
  }
  if (h != nullptr) dlclose(h);  // drops the reference NOLOAD took; the library stays
  return info;
}

void SetComputeThreads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);
  std::vector<std::string> found;
  dl_iterate_phdr(CollectBlas, &found);
  for (const auto& path : found) {
    void* h = dlopen(path.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (auto set = reinterpret_cast<void (*)(int)>(Find(h, "openblas_set_num_threads")))
      set(threads);
    else if (auto set_blis =
                 reinterpret_cast<void (*)(int64_t)>(Find(h, "bli_thread_set_num_threads")))
      set_blis(threads);
    if (h != nullptr) dlclose(h);
  }
}

void LogBlas(const char* who) {
  const BlasInfo b = DescribeBlas();
  spdlog::info("{}: {} intra-op thread{}; BLAS: {}", who, at::get_num_threads(),
               at::get_num_threads() == 1 ? "" : "s", b.ToString());
  if (b.reference())
    spdlog::warn(
        "{}: LibTorch multiplies with the reference BLAS, 2-10x slower than an optimized one: "
        "run scripts/setup.sh or `apt-get install libopenblas0-openmp` (Debian's alternatives "
        "then make it libblas.so.3)",
        who);
  else if (b.kind == BlasInfo::Kind::kUnknown)
    spdlog::warn("{}: LibTorch's BLAS ({}) is not one gradpress recognises as optimized", who,
                 b.library);
}

}  // namespace gradpress::worker
