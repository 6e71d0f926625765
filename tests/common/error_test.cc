#include "common/error.h"

#include <catch2/catch.hpp>

#include "common/logging.h"
#include "common/timer.h"

namespace gradpress {

TEST_CASE("GP_ENFORCE throws InvalidArgument with the message and location", "[error]") {
  try {
    GP_ENFORCE(1 + 1 == 3, "k=", 5, " exceeds ", "n");
    FAIL("no throw");
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    CHECK(what.find("k=5 exceeds n") == 0);
    CHECK(what.find("error_test.cc:") != std::string::npos);
    CHECK(e.code() == ErrorCode::kInvalidArgument);
  }
  CHECK_NOTHROW([] { GP_ENFORCE(true, "never"); }());
}

TEST_CASE("GP_ENFORCE_AS picks the error type", "[error]") {
  CHECK_THROWS_AS([] { GP_ENFORCE_AS(NotFound, false, "missing"); }(), NotFound);
  CHECK_THROWS_AS([] { GP_ENFORCE_AS(Unavailable, false, "down"); }(), Error);
  CHECK(std::string(ErrorCodeName(ErrorCode::kFailedPrecondition)) == "FAILED_PRECONDITION");
}

TEST_CASE("SetupLogging rejects an unknown level and an unwritable file", "[error]") {
  CHECK_THROWS_AS(SetupLogging("loud"), InvalidArgument);
  CHECK_THROWS_AS(SetupLogging("info", "/dev/null/x/y.log"), InvalidArgument);
  CHECK_NOTHROW(SetupLogging("warn"));
}

TEST_CASE("Timer is monotonic", "[error]") {
  Timer t;
  const double a = t.ElapsedMs();
  const double b = t.ElapsedMs();
  CHECK(a >= 0.0);
  CHECK(b >= a);
}

}  // namespace gradpress
