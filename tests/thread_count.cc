#include "tests/thread_count.h"

#include <dlfcn.h>
#include <pthread.h>

#include <atomic>
#include <thread>

namespace {
std::atomic<int64_t> created{0};
}

// The executable's definition comes first in symbol lookup, so std::thread (libstdc++),
// std::async and the shared libraries' own threads all start here.
extern "C" int pthread_create(pthread_t* thread, const pthread_attr_t* attr, void* (*start)(void*),
                              void* arg) noexcept {
  using Create = int (*)(pthread_t*, const pthread_attr_t*, void* (*)(void*), void*);
  static const auto real = reinterpret_cast<Create>(dlsym(RTLD_NEXT, "pthread_create"));
  created.fetch_add(1);
  return real(thread, attr, start, arg);
}

namespace gradpress::testing {

int64_t ThreadsCreated() { return created.load(); }

bool ThreadsAreCounted() {
  const int64_t before = ThreadsCreated();
  std::thread([] {}).join();
  return ThreadsCreated() > before;
}

}  // namespace gradpress::testing
