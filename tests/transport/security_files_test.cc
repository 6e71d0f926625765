// Security files and token comparison: an unreadable certificate, key, CA or token file is an
// error naming its key and path; ConstantTimeEquals compares whole strings.
#include "tests/transport/harness.h"
#include "tests/transport/pki.h"
#include "transport/security.h"

namespace gradpress::testing {
namespace {

TEST_CASE("unreadable security files name the key and the path", "[security]") {
  Secure sec;
  auto server_error = [&](SecurityConfig c) {
    return ErrorOf([&] { transport::LoadServerSecurity(c); });
  };
  auto client_error = [&](SecurityConfig c) {
    return ErrorOf([&] { transport::LoadClientSecurity(c); });
  };
  SecurityConfig s = sec.Server();
  s.cert = "/nonexistent/server.pem";
  CHECK(server_error(s).find("security.cert: cannot read '/nonexistent/server.pem'") !=
        std::string::npos);
  s = sec.Server();
  s.key = sec.dir.path();
  CHECK(server_error(s).find("security.key: cannot read '" + sec.dir.path() +
                             "': it is a directory") != std::string::npos);
  s = sec.Server(/*mutual=*/true);
  s.client_ca = "/nonexistent/ca.pem";
  CHECK(server_error(s).find("security.client_ca: cannot read") != std::string::npos);
  s = sec.Server();
  s.token_file = "/nonexistent/token";
  CHECK(server_error(s).find("security.token_file: cannot read '/nonexistent/token'") !=
        std::string::npos);
  s.token_file = sec.dir.File("blank", " \n");
  CHECK(server_error(s).find("security.token_file") != std::string::npos);
  SecurityConfig c = sec.Client();
  c.ca = "/nonexistent/ca.pem";
  CHECK(client_error(c).find("security.ca: cannot read '/nonexistent/ca.pem'") !=
        std::string::npos);
  c = sec.Client();
  c.client_cert = "/nonexistent/c.pem";
  c.client_key = Pki::Get().client_key;
  CHECK(client_error(c).find("security.client_cert: cannot read") != std::string::npos);
  // Through the config: the error names the key of the file that failed.
  Config config = ParseConfig("security: {tls: true, cert: /no/cert.pem, key: /no/key.pem}");
  CHECK(ErrorOf([&] {
          SecureCluster cluster(TestStoreOptions(1), config.security);
        }).find("security.") != std::string::npos);
}

TEST_CASE("ConstantTimeEquals compares whole strings", "[security]") {
  CHECK(transport::ConstantTimeEquals("abc", "abc"));
  CHECK_FALSE(transport::ConstantTimeEquals("abc", "abd"));
  CHECK_FALSE(transport::ConstantTimeEquals("abc", "abcd"));
  CHECK_FALSE(transport::ConstantTimeEquals("", "a"));
  CHECK(transport::ConstantTimeEquals("", ""));
}

}  // namespace
}  // namespace gradpress::testing
