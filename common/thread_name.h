#pragma once
// Names the calling thread as `top`, `ps` and `perf` show it (Linux keeps 15 characters), so a
// profile tells a server's call handlers ("gp-handler") and pool helpers ("gp-pool") from the
// gRPC threads that started them, whose name they would otherwise inherit.
//
//   NameThisThread("gp-pool");
// Thread-safety: names the calling thread only.
#include <string>

#if defined(__linux__)
#include <pthread.h>
#endif

namespace gradpress {

inline void NameThisThread(const std::string& name) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());  // best effort: no error
#else
  (void)name;
#endif
}

}  // namespace gradpress
