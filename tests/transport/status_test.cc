// Client-side status mapping (transport/status.h): which gRPC codes a worker retries.
#include "transport/status.h"

#include <catch2/catch.hpp>

#include "common/error.h"

namespace gradpress::transport {
namespace {

ErrorCode CodeOf(grpc::StatusCode code) {
  try {
    ThrowIfError(grpc::Status(code, "m"), "Call");
  } catch (const Error& e) {
    return e.code();
  }
  FAIL("no error thrown for gRPC code " << code);
  return ErrorCode::kInternal;
}

TEST_CASE("a call cancelled by the server's shutdown is retried like UNAVAILABLE", "[status]") {
  // Workers never cancel their own calls: CANCELLED comes from a server stopping with the
  // call in flight, which a retry (deduplicated by worker, incarnation and step) survives.
  CHECK(CodeOf(grpc::StatusCode::CANCELLED) == ErrorCode::kUnavailable);
  CHECK(CodeOf(grpc::StatusCode::UNAVAILABLE) == ErrorCode::kUnavailable);
  CHECK(CodeOf(grpc::StatusCode::DEADLINE_EXCEEDED) == ErrorCode::kUnavailable);
  CHECK(CodeOf(grpc::StatusCode::NOT_FOUND) == ErrorCode::kNotFound);
  CHECK(CodeOf(grpc::StatusCode::DATA_LOSS) == ErrorCode::kInternal);
}

}  // namespace
}  // namespace gradpress::transport
