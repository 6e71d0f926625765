#include "transport/status.h"

#include <spdlog/spdlog.h>

#include "common/error.h"
#include "proto/gradpress.pb.h"

namespace gradpress::transport {

namespace {

#define GP_SAME_REASON(ours, theirs) \
  static_assert(static_cast<int>(Reason::ours) == proto::theirs, #ours " != " #theirs)
GP_SAME_REASON(kUnspecified, ERROR_REASON_UNSPECIFIED);
GP_SAME_REASON(kStalePush, STALE_PUSH);
GP_SAME_REASON(kRegisterAgain, REGISTER_AGAIN);
GP_SAME_REASON(kSuperseded, SUPERSEDED);
GP_SAME_REASON(kNotRegistered, NOT_REGISTERED);
GP_SAME_REASON(kLatePush, LATE_PUSH);
GP_SAME_REASON(kAheadOfServer, AHEAD_OF_SERVER);
GP_SAME_REASON(kConfigMismatch, CONFIG_MISMATCH);
GP_SAME_REASON(kModelMismatch, MODEL_MISMATCH);
GP_SAME_REASON(kTooManyWorkers, TOO_MANY_WORKERS);
GP_SAME_REASON(kNotInitialized, NOT_INITIALIZED);
GP_SAME_REASON(kNotElected, NOT_ELECTED);
GP_SAME_REASON(kResultDropped, RESULT_DROPPED);
GP_SAME_REASON(kBadKeyOrShape, BAD_KEY_OR_SHAPE);
GP_SAME_REASON(kUndecodable, UNDECODABLE);
GP_SAME_REASON(kNonFinite, NON_FINITE);
GP_SAME_REASON(kShuttingDown, SHUTTING_DOWN);
GP_SAME_REASON(kTimedOut, TIMED_OUT);
GP_SAME_REASON(kBadRequest, BAD_REQUEST);
GP_SAME_REASON(kUnauthenticated, UNAUTHENTICATED_CALL);
#undef GP_SAME_REASON
static_assert(kReasonCount == proto::ErrorReason_ARRAYSIZE, "Reason and proto::ErrorReason differ");

}  // namespace

grpc::Status StatusWithReason(grpc::StatusCode code, const std::string& message, Reason reason) {
  proto::RpcStatus details;
  details.set_code(static_cast<int>(code));
  details.set_message(message);
  proto::ErrorInfo info;
  info.set_reason(static_cast<proto::ErrorReason>(reason));
  details.add_details()->PackFrom(info);
  return {code, message, details.SerializeAsString()};
}

Reason ReasonOf(const grpc::Status& status) {
  proto::RpcStatus details;
  if (status.error_details().empty() || !details.ParseFromString(status.error_details()))
    return Reason::kUnspecified;
  for (const auto& any : details.details()) {
    proto::ErrorInfo info;
    if (any.UnpackTo(&info) && info.reason() >= 0 && info.reason() < kReasonCount)
      return static_cast<Reason>(info.reason());
  }
  return Reason::kUnspecified;
}

grpc::Status ToStatus(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    // The client gets the message and the reason; the throw site stays in this log.
    if (e.code() == ErrorCode::kUnavailable) {
      spdlog::debug("call refused ({}): {}", ReasonName(e.reason()), e.what());
    } else {
      spdlog::info("call refused ({}): {}", ReasonName(e.reason()), e.what());
    }
    grpc::StatusCode code = grpc::StatusCode::INTERNAL;
    switch (e.code()) {
      case ErrorCode::kInvalidArgument:
        code = grpc::StatusCode::INVALID_ARGUMENT;
        break;
      case ErrorCode::kNotFound:
        code = grpc::StatusCode::NOT_FOUND;
        break;
      case ErrorCode::kFailedPrecondition:
        code = grpc::StatusCode::FAILED_PRECONDITION;
        break;
      case ErrorCode::kUnavailable:
        code = grpc::StatusCode::UNAVAILABLE;
        break;
      case ErrorCode::kInternal:
        code = grpc::StatusCode::INTERNAL;
        break;
    }
    // A malformed request without a more specific reason is still one.
    const Reason reason =
        e.reason() == Reason::kUnspecified && code == grpc::StatusCode::INVALID_ARGUMENT
            ? Reason::kBadRequest
            : e.reason();
    return StatusWithReason(code, e.message(), reason);
  } catch (const std::bad_alloc&) {
    return {grpc::StatusCode::RESOURCE_EXHAUSTED, "server out of memory"};
  } catch (const std::exception& e) {
    return {grpc::StatusCode::INTERNAL, std::string("internal error: ") + e.what()};
  } catch (...) {
    return {grpc::StatusCode::INTERNAL, "internal error"};
  }
}

void ThrowIfError(const grpc::Status& status, const std::string& what) {
  if (status.ok()) return;
  const std::string msg = what + ": " + status.error_message();
  const Reason reason = ReasonOf(status);
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      throw InvalidArgument(msg, reason);
    case grpc::StatusCode::NOT_FOUND:
      throw NotFound(msg, reason);
    case grpc::StatusCode::FAILED_PRECONDITION:
      throw FailedPrecondition(msg, reason);
    case grpc::StatusCode::UNAUTHENTICATED:
      throw FailedPrecondition(msg +
                                   " (UNAUTHENTICATED: the server requires a bearer token; set "
                                   "security.token_file or $GRADPRESS_TOKEN to the server's token)",
                               Reason::kUnauthenticated);
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    // Workers never cancel their own calls: CANCELLED is a server that stopped with the call
    // in flight, as transient as UNAVAILABLE (a retry is deduplicated by the server).
    case grpc::StatusCode::CANCELLED:
      throw Unavailable(msg + " (" + std::to_string(status.error_code()) + ")", reason);
    default:
      throw Internal(msg + " (gRPC code " + std::to_string(status.error_code()) + ")", reason);
  }
}

}  // namespace gradpress::transport
