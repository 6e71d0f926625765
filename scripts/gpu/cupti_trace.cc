// A CUDA injection library that says where a process's GPU time and waits go, for GPU machines
// without Nsight Systems: CUPTI's activity records of kernels, copies, memsets, runtime API
// calls and synchronisations, summed by name and written when the process exits.
//
//   g++ -std=c++17 -shared -fPIC -O2 -I$CUDA/include scripts/gpu/cupti_trace.cc
//       -L$(dirname $LIBCUPTI) -lcupti -Wl,-rpath,$(dirname $LIBCUPTI) -o libgp_trace.so
//   CUDA_INJECTION64_PATH=$PWD/libgp_trace.so GP_TRACE_OUT=/tmp/trace-%p.txt gradpress-worker ...
//
// CUDA loads the library at its initialisation and calls InitializeInjection. GP_TRACE_OUT
// ("%p" becomes the process id; stderr when unset) receives the report: per kernel, copy kind,
// runtime call and synchronisation type, the count and the time summed over the run. Built
// and run by scripts/gpu/check.sh (stage trace); not part of the CMake build.
#include <cupti.h>
#include <cxxabi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace {

struct Sum {
  uint64_t count = 0, ns = 0, bytes = 0;
  void Add(uint64_t start, uint64_t end, uint64_t b = 0) {
    ++count;
    ns += end > start ? end - start : 0;
    bytes += b;
  }
};

std::mutex mu;
std::map<std::string, Sum> kernels, copies, api, syncs;
uint64_t first_ns = ~uint64_t{0}, last_ns = 0;
uint64_t records = 0;

std::string Demangled(const char* name) {
  if (name == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : name;
  std::free(d);
  if (s.size() > 100) s = s.substr(0, 97) + "...";
  return s;
}

const char* CopyKind(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "memcpy DtoD";
    default:
      return "memcpy other";
  }
}

const char* SyncType(CUpti_ActivitySynchronizationType t) {
  switch (t) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "event synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "stream wait event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "stream synchronize";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "context synchronize";
    default:
      return "other";
  }
}

void Span(uint64_t start, uint64_t end) {
  first_ns = std::min(first_ns, start);
  last_ns = std::max(last_ns, end);
  ++records;
}

void Take(const CUpti_Activity* r) {
  std::lock_guard<std::mutex> lock(mu);
  switch (r->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(r);
      kernels[Demangled(k->name)].Add(k->start, k->end);
      Span(k->start, k->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(r);
      copies[CopyKind(m->copyKind)].Add(m->start, m->end, m->bytes);
      Span(m->start, m->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(r);
      copies["memset"].Add(m->start, m->end, m->bytes);
      Span(m->start, m->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_RUNTIME: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(r);
      const char* name = nullptr;
      cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name);
      api[name ? name : "?"].Add(a->start, a->end);
      Span(a->start, a->end);
      break;
    }
    case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
      const auto* s = reinterpret_cast<const CUpti_ActivitySynchronization2*>(r);
      syncs[SyncType(s->type)].Add(s->start, s->end);
      Span(s->start, s->end);
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = size_t{8} << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* r = nullptr;
  while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) Take(r);
  std::free(buffer);
}

void Table(std::FILE* f, const char* title, const std::map<std::string, Sum>& sums, size_t top) {
  std::vector<std::pair<std::string, Sum>> rows(sums.begin(), sums.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.ns > b.second.ns; });
  std::fprintf(f, "\n%s (by total time)\n%10s %12s %10s %12s  %s\n", title, "count", "total ms",
               "mean us", "MB", "name");
  for (size_t i = 0; i < rows.size() && i < top; ++i) {
    const Sum& s = rows[i].second;
    std::fprintf(f, "%10llu %12.3f %10.2f %12.3f  %s\n", static_cast<unsigned long long>(s.count),
                 s.ns / 1e6, s.count ? s.ns / 1e3 / s.count : 0.0, s.bytes / 1e6,
                 rows[i].first.c_str());
  }
}

void Report() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(mu);
  std::string path = std::getenv("GP_TRACE_OUT") ? std::getenv("GP_TRACE_OUT") : "";
  const size_t at = path.find("%p");
  if (at != std::string::npos) path.replace(at, 2, std::to_string(getpid()));
  std::FILE* f = path.empty() ? stderr : std::fopen(path.c_str(), "w");
  if (f == nullptr) f = stderr;
  std::fprintf(f, "gp cupti trace, pid %d: %llu records over %.3f ms\n", getpid(),
               static_cast<unsigned long long>(records),
               last_ns > first_ns ? (last_ns - first_ns) / 1e6 : 0.0);
  Table(f, "kernels", kernels, 40);
  Table(f, "copies and memsets", copies, 10);
  Table(f, "runtime API calls", api, 25);
  Table(f, "synchronisations (host waits)", syncs, 10);
  if (f != stderr) std::fclose(f);
}

}  // namespace

extern "C" int InitializeInjection(void) {
  if (cuptiActivityRegisterCallbacks(BufferRequested, BufferCompleted) != CUPTI_SUCCESS) return 0;
  for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                               CUPTI_ACTIVITY_KIND_MEMSET, CUPTI_ACTIVITY_KIND_RUNTIME,
                               CUPTI_ACTIVITY_KIND_SYNCHRONIZATION}) {
    if (cuptiActivityEnable(k) != CUPTI_SUCCESS)
      std::fprintf(stderr, "gp cupti trace: activity kind %d not enabled\n", static_cast<int>(k));
  }
  std::atexit(Report);
  return 1;
}
