#include "transport/security.h"

#include <grpc/grpc_security_constants.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/error.h"
#include "common/strings.h"
#include "transport/status.h"

namespace gradpress::transport {
namespace {

// The whole file named by security.<key>; InvalidArgument naming both if it cannot be read.
std::string ReadFile(const char* key, const std::string& path) {
  std::error_code ec;
  GP_ENFORCE(!std::filesystem::is_directory(path, ec), "security.", key, ": cannot read '", path,
             "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  GP_ENFORCE(static_cast<bool>(in), "security.", key, ": cannot read '", path,
             "': ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  GP_ENFORCE(!text.str().empty(), "security.", key, ": '", path, "' is empty");
  return text.str();
}

std::string TokenPlaintextError(const char* side) {
  return std::string(side) +
         ": a bearer token is configured (security.token_file or $GRADPRESS_TOKEN) but "
         "security.tls is false, so the token would travel in clear text; enable TLS, or set "
         "security.allow_plaintext_token=true on a trusted network";
}

}  // namespace

std::string ResolveToken(const SecurityConfig& c) {
  const char* env = std::getenv(kTokenEnv);
  if (env != nullptr && *env != '\0') {
    const std::string t = Trim(env);
    GP_ENFORCE(!t.empty(), "$", kTokenEnv, " holds only white space");
    return t;
  }
  if (c.token_file.empty()) return "";
  const std::string t = Trim(ReadFile("token_file", c.token_file));
  GP_ENFORCE(!t.empty(), "security.token_file: '", c.token_file, "' holds only white space");
  GP_ENFORCE(t.find_first_of("\r\n") == std::string::npos, "security.token_file: '", c.token_file,
             "' holds more than one line");
  return t;
}

ServerSecurity LoadServerSecurity(const SecurityConfig& c) {
  ServerSecurity s;
  s.token = ResolveToken(c);
  s.tls = c.tls;
  if (c.tls) {
    GP_ENFORCE(!c.cert.empty() && !c.key.empty(),
               "security.tls is true: the server needs security.cert and security.key");
    grpc::SslServerCredentialsOptions o;
    o.pem_key_cert_pairs.push_back({ReadFile("key", c.key), ReadFile("cert", c.cert)});
    if (!c.client_ca.empty()) {
      o.pem_root_certs = ReadFile("client_ca", c.client_ca);
      o.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
      s.mutual = true;
    }
    s.credentials = grpc::SslServerCredentials(o);
  } else {
    GP_ENFORCE(s.token.empty() || c.allow_plaintext_token, TokenPlaintextError("server"));
    s.credentials = grpc::InsecureServerCredentials();
  }
  return s;
}

std::string ServerSecurity::Summary(int port) const {
  if (tls) {
    return std::string("TLS") + (mutual ? " (mutual)" : " (server certificate only)") +
           (token.empty() ? ", no token" : ", bearer token required");
  }
  if (!token.empty()) return "bearer token over PLAINTEXT (allow_plaintext_token)";
  return "plaintext, no token: anyone who can reach :" + std::to_string(port) + " can join";
}

void ClientSecurity::Apply(grpc::ChannelArguments* args) const {
  if (!server_name.empty()) args->SetSslTargetNameOverride(server_name);
}

ClientSecurity LoadClientSecurity(const SecurityConfig& c) {
  ClientSecurity s;
  s.token = ResolveToken(c);
  if (!s.token.empty()) s.header = "Bearer " + s.token;
  s.tls = c.tls;
  if (c.tls) {
    grpc::SslCredentialsOptions o;
    if (!c.ca.empty()) o.pem_root_certs = ReadFile("ca", c.ca);
    if (!c.client_cert.empty()) {
      o.pem_cert_chain = ReadFile("client_cert", c.client_cert);
      o.pem_private_key = ReadFile("client_key", c.client_key);
    }
    s.credentials = grpc::SslCredentials(o);
    s.server_name = c.server_name;
  } else {
    GP_ENFORCE(s.token.empty() || c.allow_plaintext_token, TokenPlaintextError("worker"));
    s.credentials = grpc::InsecureChannelCredentials();
  }
  return s;
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::max(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const unsigned char x = i < a.size() ? a[i] : 0, y = i < b.size() ? b[i] : 0;
    diff |= x ^ y;
  }
  return diff == 0;
}

grpc::Status CheckToken(const grpc::ServerContextBase& ctx, std::string_view token) {
  if (token.empty()) return grpc::Status::OK;
  const auto& md = ctx.client_metadata();
  const auto it = md.find(kAuthorizationKey);
  if (it == md.end())
    return StatusWithReason(grpc::StatusCode::UNAUTHENTICATED, "missing bearer token",
                            Reason::kUnauthenticated);
  std::string_view got(it->second.data(), it->second.size());
  constexpr std::string_view kBearer = "Bearer ";
  if (got.size() < kBearer.size() || got.substr(0, kBearer.size()) != kBearer)
    return StatusWithReason(grpc::StatusCode::UNAUTHENTICATED, "missing bearer token",
                            Reason::kUnauthenticated);
  got.remove_prefix(kBearer.size());
  if (!ConstantTimeEquals(got, token))
    return StatusWithReason(grpc::StatusCode::UNAUTHENTICATED, "bad bearer token",
                            Reason::kUnauthenticated);
  return grpc::Status::OK;
}

}  // namespace gradpress::transport
