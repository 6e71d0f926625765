#pragma once
// The gradpress error family. Everything that can go wrong because of input from the
// network, a config file or a data file throws one of these; the gRPC service adapter
// maps them to a status code in one place (InvalidArgument -> INVALID_ARGUMENT, ...).
//
//   GP_ENFORCE(k <= n, "k=", k, " exceeds numel ", n);          // throws InvalidArgument
//   GP_ENFORCE_AS(NotFound, it != keys.end(), "unknown key '", key, "'");
//
// Thread-safety: the types are plain values.
#include <sstream>
#include <stdexcept>
#include <string>

namespace gradpress {

enum class ErrorCode { kInvalidArgument, kNotFound, kUnavailable, kFailedPrecondition, kInternal };

const char* ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
  ErrorCode code() const { return code_; }

 private:
  ErrorCode code_;
};

#define GP_DEFINE_ERROR(Name)                                                         \
  class Name : public Error {                                                         \
   public:                                                                            \
    explicit Name(const std::string& message) : Error(ErrorCode::k##Name, message) {} \
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
// Builds "message (file:line)".
std::string WithLocation(const std::string& message, const char* file, int line);

// The throwing half of GP_ENFORCE, out of line and marked cold so that checks inside hot
// loops cost one predictable branch.
template <typename E, typename... Args>
[[noreturn]] __attribute__((cold, noinline)) void Throw(const char* file, int line,
                                                        const Args&... args) {
  throw E(WithLocation(StrCat(args...), file, line));
}
}  // namespace detail

}  // namespace gradpress

#define GP_ENFORCE_AS(ErrorType, cond, ...)                                                \
  do {                                                                                     \
    if (__builtin_expect(!(cond), 0)) {                                                    \
      ::gradpress::detail::Throw<::gradpress::ErrorType>(__FILE__, __LINE__, __VA_ARGS__); \
    }                                                                                      \
  } while (0)

#define GP_ENFORCE(cond, ...) GP_ENFORCE_AS(InvalidArgument, cond, __VA_ARGS__)
