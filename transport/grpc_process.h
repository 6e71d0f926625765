#pragma once

namespace gradpress::transport {

// Settings of the gRPC runtime for the whole process, applied by whatever makes a server or a
// channel (idempotent, cheap, any thread). Debian's Abseil is built without NDEBUG, so every
// absl::Mutex that gRPC locks would run Abseil's deadlock detector: a lookup in one
// process-wide graph under one global lock, on every lock of every call. It is a debugging
// aid that release builds of gRPC leave off; here it is turned off.
void ConfigureGrpcProcess();

}  // namespace gradpress::transport
