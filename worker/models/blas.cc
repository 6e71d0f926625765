#include "worker/models/blas.h"

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

// The BLAS library LibTorch calls, already loaded: the generic libblas.so.3 LibTorch links
// (its symbols lookups reach the library behind it), else the first BLAS-named one. Holds a
// NOLOAD reference, dropped on destruction (the library itself stays loaded).
class LoadedBlas {
 public:
  LoadedBlas() {
    std::vector<std::string> found;
    dl_iterate_phdr(CollectBlas, &found);
    if (found.empty()) return;
    const auto generic = std::find_if(found.begin(), found.end(), [](const std::string& p) {
      return std::filesystem::path(p).filename().string().rfind("libblas.so", 0) == 0;
    });
    path_ = generic != found.end() ? *generic : found.front();
    handle_ = dlopen(path_.c_str(), RTLD_LAZY | RTLD_NOLOAD);
  }
  ~LoadedBlas() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  LoadedBlas(const LoadedBlas&) = delete;
  LoadedBlas& operator=(const LoadedBlas&) = delete;
  const std::string& path() const { return path_; }
  // A symbol of the library (or of those it depends on); nullptr if absent.
  template <typename Fn>
  Fn Find(const char* symbol) const {
    return handle_ ? reinterpret_cast<Fn>(dlsym(handle_, symbol)) : nullptr;
  }

 private:
  std::string path_;
  void* handle_ = nullptr;
};

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
  const LoadedBlas blas;
  BlasInfo info;
  if (blas.path().empty()) return info;
  info.library = Resolved(blas.path());
  using IntFn = int (*)();
  if (auto config = blas.Find<char* (*)()>("openblas_get_config")) {
    info.kind = BlasInfo::Kind::kOpenBlas;
    info.name = config();
    if (info.name.rfind("OpenBLAS", 0) != 0) info.name = "OpenBLAS " + info.name;
    if (auto parallel = blas.Find<IntFn>("openblas_get_parallel")) {
      const int mode = parallel();  // 0 sequential, 1 pthreads, 2 OpenMP
      info.name += mode == 2 ? " (OpenMP)" : mode == 1 ? " (pthreads)" : " (sequential)";
    }
    if (auto n = blas.Find<IntFn>("openblas_get_num_threads")) info.threads = n();
  } else if (auto version = blas.Find<const char* (*)()>("bli_info_get_version_str")) {
    info.kind = BlasInfo::Kind::kBlis;
    info.name = std::string("BLIS ") + version();
    if (auto n = blas.Find<IntFn>("bli_thread_get_num_threads")) info.threads = n();
  } else if (blas.Find<void*>("MKL_Get_Max_Threads") != nullptr) {
    info.kind = BlasInfo::Kind::kMkl;
    info.name = "Intel MKL";
  } else {
    // A libblas.so.3 with none of the optimized libraries' entry points: Debian's libblas3
    // (/usr/lib/<arch>/blas/) is the reference implementation; anything else is unrecognised.
    const bool netlib = info.library.find("/blas/") != std::string::npos;
    info.kind = netlib ? BlasInfo::Kind::kReference : BlasInfo::Kind::kUnknown;
    info.name = netlib ? "reference BLAS" : "an unrecognised BLAS";
  }
  return info;
}

void SetComputeThreads(int threads) {
  threads = std::max(1, threads);
  at::set_num_threads(threads);
  const LoadedBlas blas;
  if (auto set = blas.Find<void (*)(int)>("openblas_set_num_threads"))
    set(threads);
  else if (auto set_blis = blas.Find<void (*)(int64_t)>("bli_thread_set_num_threads"))
    set_blis(threads);
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
