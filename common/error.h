#pragma once
// The gradpress error family. Everything that can go wrong because of input from the
// network, a config file or a data file throws one of these; the gRPC service adapter
// maps them to a status code in one place (InvalidArgument -> INVALID_ARGUMENT, ...).
//
//   GP_ENFORCE(k <= n, "k=", k, " exceeds numel ", n);          // throws InvalidArgument
//   GP_ENFORCE_AS(NotFound, it != keys.end(), "unknown key '", key, "'");
//   GP_REFUSE(FailedPrecondition, Reason::kStalePush, lag <= max, "push is ", lag, " stale");
//
// A refusal carries a machine-readable Reason next to its code; programs branch on code and
// reason, never on the message. The service sends the reason as gRPC status details
// (transport/status.h) and the client side rebuilds it. what() ends with the throwing
// source's "(file:line)", for logs; message() is the text without it (what clients are sent).
//
// Thread-safety: the types are plain values.
#include <sstream>
#include <stdexcept>
#include <string>

namespace gradpress {

enum class ErrorCode { kInvalidArgument, kNotFound, kUnavailable, kFailedPrecondition, kInternal };

const char* ErrorCodeName(ErrorCode code);

// Why a call was refused. The values are those of proto::ErrorReason (proto/gradpress.proto).
enum class Reason : int {
  kUnspecified = 0,
  kStalePush = 1,         // async: the push's base step lags more than max_staleness
  kRegisterAgain = 2,     // the server restarted or dropped the worker: Register, then go on
  kSuperseded = 3,        // a newer incarnation of this worker has registered
  kNotRegistered = 4,     // unknown worker, or this incarnation never registered
  kLatePush = 5,          // the push's step completed without it
  kAheadOfServer = 6,     // the push's step is not open yet
  kConfigMismatch = 7,    // another job config (hash) than the first worker's
  kModelMismatch = 8,     // model fingerprint or bucket split differs
  kTooManyWorkers = 9,    // every expected worker has registered
  kNotInitialized = 10,   // the server has no weights yet
  kNotElected = 11,       // method 6: only the elected worker may publish
  kResultDropped = 12,    // the step's result or the election is no longer kept
  kBadKeyOrShape = 13,    // unknown, missing or repeated key; wrong shape
  kUndecodable = 14,      // a payload that does not decode
  kNonFinite = 15,        // NaN or Inf in a decoded payload
  kShuttingDown = 16,     // the server is stopping
  kTimedOut = 17,         // waited until the deadline (for other workers, a buffer): retry
  kBadRequest = 18,       // another malformed request (bad option, out-of-range field)
  kUnauthenticated = 19,  // missing or wrong bearer token
};
constexpr int kReasonCount = 20;
// "stale_push", ...: also the reason label of gradpress_rejected_total.
const char* ReasonName(Reason reason);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message, Reason reason = Reason::kUnspecified,
        const std::string& where = "")
      : std::runtime_error(where.empty() ? message : message + " (" + where + ")"),
        code_(code),
        reason_(reason),
        length_(message.size()) {}
  ErrorCode code() const { return code_; }
  Reason reason() const { return reason_; }
  // The message without the "(file:line)" that what() ends with.
  std::string message() const { return std::string(what(), length_); }

 private:
  ErrorCode code_;
  Reason reason_;
  size_t length_;
};

#define GP_DEFINE_ERROR(Name)                                                       \
  class Name : public Error {                                                       \
   public:                                                                          \
    explicit Name(const std::string& message, Reason reason = Reason::kUnspecified, \
                  const std::string& where = "")                                    \
        : Error(ErrorCode::k##Name, message, reason, where) {}                      \
  };
GP_DEFINE_ERROR(InvalidArgument)
GP_DEFINE_ERROR(NotFound)
GP_DEFINE_ERROR(Unavailable)
GP_DEFINE_ERROR(FailedPrecondition)
GP_DEFINE_ERROR(Internal)
#undef GP_DEFINE_ERROR

namespace detail {
template <typename... Args>
std::string StrCat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
// "file.cc:line" of a throw site.
std::string Location(const char* file, int line);

// The throwing half of GP_ENFORCE, out of line and marked cold so that checks inside hot
// loops cost one predictable branch.
template <typename E, typename... Args>
[[noreturn]] __attribute__((cold, noinline)) void Throw(const char* file, int line, Reason reason,
                                                        const Args&... args) {
  throw E(StrCat(args...), reason, Location(file, line));
}
}  // namespace detail

}  // namespace gradpress

#define GP_REFUSE(ErrorType, reason, cond, ...)                                                    \
  do {                                                                                             \
    if (__builtin_expect(!(cond), 0)) {                                                            \
      ::gradpress::detail::Throw<::gradpress::ErrorType>(__FILE__, __LINE__, reason, __VA_ARGS__); \
    }                                                                                              \
  } while (0)

#define GP_ENFORCE_AS(ErrorType, cond, ...) \
  GP_REFUSE(ErrorType, ::gradpress::Reason::kUnspecified, cond, __VA_ARGS__)

#define GP_ENFORCE(cond, ...) GP_ENFORCE_AS(InvalidArgument, cond, __VA_ARGS__)
