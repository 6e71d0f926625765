#include "transport/status.h"

#include "common/error.h"

namespace gradpress::transport {

grpc::Status ToStatus(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    switch (e.code()) {
      case ErrorCode::kInvalidArgument:
        return {grpc::StatusCode::INVALID_ARGUMENT, e.what()};
      case ErrorCode::kNotFound:
        return {grpc::StatusCode::NOT_FOUND, e.what()};
      case ErrorCode::kFailedPrecondition:
        return {grpc::StatusCode::FAILED_PRECONDITION, e.what()};
      case ErrorCode::kUnavailable:
        return {grpc::StatusCode::UNAVAILABLE, e.what()};
      case ErrorCode::kInternal:
        return {grpc::StatusCode::INTERNAL, e.what()};
    }
    return {grpc::StatusCode::INTERNAL, e.what()};
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
  switch (status.error_code()) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      throw InvalidArgument(msg);
    case grpc::StatusCode::NOT_FOUND:
      throw NotFound(msg);
    case grpc::StatusCode::FAILED_PRECONDITION:
      throw FailedPrecondition(msg);
    case grpc::StatusCode::UNAUTHENTICATED:
      throw FailedPrecondition(msg +
                               " (UNAUTHENTICATED: the server requires a bearer token; set "
                               "security.token_file or $GRADPRESS_TOKEN to the server's token)");
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
    // Workers never cancel their own calls: CANCELLED is a server that stopped with the call
    // in flight, as transient as UNAVAILABLE (a retry is deduplicated by the server).
    case grpc::StatusCode::CANCELLED:
      throw Unavailable(msg + " (" + std::to_string(status.error_code()) + ")");
    default:
      throw Internal(msg + " (gRPC code " + std::to_string(status.error_code()) + ")");
  }
}

}  // namespace gradpress::transport
