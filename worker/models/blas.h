#pragma once
// Which BLAS this process's LibTorch multiplies with, and the compute threads of a worker.
//
// Debian's LibTorch (and python3-torch) call the generic `libblas.so.3`, which Debian's
// alternatives point at the reference (Netlib) BLAS or at an optimized one (OpenBLAS, BLIS).
// The reference BLAS is 2-10x slower on the layers gradpress trains, so a worker says at start
// which one it runs on and warns when it is the reference (scripts/setup.sh installs OpenBLAS).
//
//   const BlasInfo b = DescribeBlas();      // b.name "OpenBLAS 0.3.21 ...", b.reference false
//   SetComputeThreads(config.train.threads); // LibTorch's intra-op threads and the BLAS's own
//
// Thread-safety: DescribeBlas may be called from any thread; SetComputeThreads sets
// process-wide settings (call it from the thread that trains, before training).
#include <string>

namespace gradpress::worker {

struct BlasInfo {
  enum class Kind { kNone, kReference, kOpenBlas, kBlis, kMkl, kUnknown };
  Kind kind = Kind::kNone;
  std::string name;     // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Zen MAX_THREADS=64"
  std::string library;  // the file the BLAS symbols come from, links resolved ("" if none)
  int threads = 0;      // the BLAS's own thread count where it says (0: it does not say)
  // True when the BLAS is the slow reference implementation (or one not recognised as
  // optimized), so training runs well below the machine's speed.
  bool reference() const { return kind == Kind::kReference; }
  std::string ToString() const;  // one line for a log
};

// Looks among the libraries loaded into this process for the one LibTorch's BLAS calls
// resolve to, and asks it for its name and threads. Never throws.
BlasInfo DescribeBlas();

// Sets LibTorch's intra-op threads to `threads` (at least 1) and, where the BLAS has its own
// thread pool (OpenBLAS built with pthreads, BLIS), its threads too, so a worker's compute
// uses `threads` cores in all and does not oversubscribe gradpress's own pools. (OpenBLAS
// built with OpenMP follows LibTorch's OpenMP setting by itself.)
void SetComputeThreads(int threads);

// Logs DescribeBlas() at info level, and a warning naming the fix when it is the reference.
void LogBlas(const char* who);

}  // namespace gradpress::worker
