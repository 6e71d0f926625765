#pragma once
// Plain TCP throughput over 127.0.0.1: the ceiling the gRPC transport is compared against.
//
//   double gbps = TcpLoopbackGbps(/*bytes=*/2 * 4 * numel, /*runs=*/3);
//
// One run: a listening socket on 127.0.0.1:0, a connected pair, a receiver thread that
// reads until `bytes` arrived, and the calling thread sending `bytes` in 1 MiB send()
// calls from one reused buffer. Seconds = first send until the receiver has read the last
// byte (connection set-up excluded). Returns the median over `runs` of bytes / seconds / 1e9.
// Throws std::runtime_error naming the failing socket call. Thread-safety: any thread.
#include <cstdint>

namespace gradpress::bench {

constexpr uint64_t kTcpWriteBytes = 1 << 20;  // per send() call

// Seconds for one loopback transfer of `bytes` (>= 1).
double TcpLoopbackSeconds(uint64_t bytes);
// Median GB/s (1e9 bytes per second) of `runs` (>= 1) transfers of `bytes`.
double TcpLoopbackGbps(uint64_t bytes, int runs = 3);

}  // namespace gradpress::bench
