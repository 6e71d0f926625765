#pragma once
// Threads this process has started (pthread_create calls, by anyone: std::thread, std::async,
// gRPC, LibTorch), counted by an interposed pthread_create (tests/thread_count.cc, linked
// into the test executable). Threads that have already ended are counted too, which
// /proc/self/task cannot show: a thread per call leaves no thread behind.
#include <cstdint>

namespace gradpress::testing {

int64_t ThreadsCreated();

// Whether the count works in this executable: a std::thread started here is counted.
bool ThreadsAreCounted();

}  // namespace gradpress::testing
