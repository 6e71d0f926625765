// Client-side status mapping (transport/status.h): which gRPC codes a worker retries.
#include "transport/status.h"

#include <catch2/catch.hpp>

#include "common/error.h"
#include "proto/gradpress.pb.h"

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

namespace gradpress::transport {
namespace {

TEST_CASE("a refusal's reason travels as status details, its file:line stays on the server",
          "[status]") {
  grpc::Status s;
  try {
    GP_REFUSE(FailedPrecondition, Reason::kStalePush, false, "push is 5 steps stale");
  } catch (...) {
    s = ToStatus(std::current_exception());
  }
  CHECK(s.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(s.error_message() == "push is 5 steps stale");  // no "(status_test.cc:NN)"
  // Any gRPC client reads the details with the generated messages (google.rpc.Status layout).
  proto::RpcStatus details;
  REQUIRE(details.ParseFromString(s.error_details()));
  CHECK(details.code() == grpc::StatusCode::FAILED_PRECONDITION);
  REQUIRE(details.details_size() == 1);
  proto::ErrorInfo info;
  REQUIRE(details.details(0).UnpackTo(&info));
  CHECK(info.reason() == proto::STALE_PUSH);
  // And the worker's side rebuilds it.
  Reason got = Reason::kUnspecified;
  try {
    ThrowIfError(s, "PushPull");
  } catch (const FailedPrecondition& e) {
    got = e.reason();
  }
  CHECK(got == Reason::kStalePush);
  CHECK(ReasonOf(grpc::Status(grpc::StatusCode::NOT_FOUND, "m")) == Reason::kUnspecified);
  CHECK(ReasonOf(grpc::Status(grpc::StatusCode::NOT_FOUND, "m", "\xff garbage")) ==
        Reason::kUnspecified);
}

TEST_CASE("every reason has a name and the proto's value", "[status]") {
  for (int r = 0; r < kReasonCount; ++r) {
    CHECK(std::string(ReasonName(static_cast<Reason>(r))) != "unknown");
    CHECK(proto::ErrorReason_IsValid(r));
  }
  CHECK(std::string(ReasonName(Reason::kRegisterAgain)) == "register_again");
}

}  // namespace
}  // namespace gradpress::transport
