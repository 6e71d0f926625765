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
// Unavailable (retried).
// Reasons: ToStatus sends the Error's Reason as status details (a serialized
// proto::RpcStatus, wire-compatible with google.rpc.Status, holding a proto::ErrorInfo) and
// the message without the throw site's file:line, which it logs on the server instead;
// ThrowIfError reads the reason back into the Error it throws (kUnspecified without one).
// Thread-safety: pure functions.
#include <grpcpp/support/status.h>

#include <exception>
#include <string>

#include "common/error.h"

namespace gradpress::transport {

grpc::Status ToStatus(std::exception_ptr error);
// Throws the gradpress::Error matching a non-OK status, prefixed by `what`.
void ThrowIfError(const grpc::Status& status, const std::string& what);
// A status carrying `reason` as its details (what ToStatus sends).
grpc::Status StatusWithReason(grpc::StatusCode code, const std::string& message, Reason reason);
// The reason in a status' details (kUnspecified if none or unparsable).
Reason ReasonOf(const grpc::Status& status);

}  // namespace gradpress::transport
