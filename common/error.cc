#include "common/error.h"

#include <cstring>

namespace gradpress {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
      return "INVALID_ARGUMENT";
    case ErrorCode::kNotFound:
      return "NOT_FOUND";
    case ErrorCode::kUnavailable:
      return "UNAVAILABLE";
    case ErrorCode::kFailedPrecondition:
      return "FAILED_PRECONDITION";
    case ErrorCode::kInternal:
      return "INTERNAL";
  }
  return "UNKNOWN";
}

const char* ReasonName(Reason reason) {
  static const char* const kNames[kReasonCount] = {
      "unspecified",    "stale_push",       "register_again",  "superseded",
      "not_registered", "late_push",        "ahead_of_server", "config_mismatch",
      "model_mismatch", "too_many_workers", "not_initialized", "not_elected",
      "result_dropped", "bad_key_or_shape", "undecodable",     "non_finite",
      "shutting_down",  "timed_out",        "bad_request",     "unauthenticated"};
  const int i = static_cast<int>(reason);
  return i >= 0 && i < kReasonCount ? kNames[i] : "unknown";
}

namespace detail {
std::string Location(const char* file, int line) {
  const char* base = std::strrchr(file, '/');
  return std::string(base ? base + 1 : file) + ":" + std::to_string(line);
}
}  // namespace detail

}  // namespace gradpress
