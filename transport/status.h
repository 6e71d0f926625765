#pragma once
// gradpress errors <-> gRPC status, in one place for both ends.
//
//   Server handler:  try { ... } catch (...) { return ToStatus(std::current_exception()); }
//   Client:          ThrowIfError(status, "PushPull");   // throws the matching Error
//
// Mapping: InvalidArgument -> INVALID_ARGUMENT, NotFound -> NOT_FOUND, FailedPrecondition ->
// FAILED_PRECONDITION, Unavailable -> UNAVAILABLE, Internal and anything else -> INTERNAL.
// Client side, UNAUTHENTICATED (a missing or bad bearer token) throws FailedPrecondition with
// a hint, and is never retried; DEADLINE_EXCEEDED and CANCELLED (a server stopping mid-call) throw
// Unavailable (retried). Thread-safety: pure functions.
#include <grpcpp/support/status.h>

#include <exception>
#include <string>

namespace gradpress::transport {

grpc::Status ToStatus(std::exception_ptr error);
// Throws the gradpress::Error matching a non-OK status, prefixed by `what`.
void ThrowIfError(const grpc::Status& status, const std::string& what);

}  // namespace gradpress::transport
