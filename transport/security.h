#pragma once
// Transport security from the `security:` config block: TLS credentials for the server and the
// workers' channels, and the bearer token every ParameterServer RPC must carry.
//
//   ServerSecurity s = LoadServerSecurity(config.security);   // reads files and $GRADPRESS_TOKEN
//   builder.AddListeningPort(address, s.credentials);  spdlog::info("security: {}",
//   s.Summary(port)); if (grpc::Status st = CheckToken(*ctx, s.token); !st.ok()) return st;   // in
//   each handler
//
//   ClientSecurity c = LoadClientSecurity(config.security);
//   c.Apply(&channel_args);  channel = grpc::CreateCustomChannel(addr, c.credentials, args);
//   if (!c.token.empty()) ctx.AddMetadata(kAuthorizationKey, c.header);
//
// Rules:
// - tls: the server presents security.cert/key; with security.client_ca it requires client
//   certificates signed by that CA (mutual TLS). The worker trusts security.ca (system roots if
//   empty), presents client_cert/key if set, and checks the server's certificate against
//   server_name (default: the host of the address).
// - The token is the trimmed content of security.token_file; $GRADPRESS_TOKEN (non-empty)
//   overrides it. It travels as "authorization: Bearer <token>" metadata and is compared in
//   constant time. A token over plaintext is refused on both sides (InvalidArgument) unless
//   security.allow_plaintext_token, which the server warns about at start.
// - Only gradpress.ParameterServer RPCs are authenticated. The grpc.health.v1 health service
//   stays open: Kubernetes and Docker probes cannot send metadata (it tells nothing but
//   SERVING).
// - A file that cannot be read, or is empty, is an InvalidArgument naming the key and path.
// Thread-safety: plain values; CheckToken is a pure function.
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_context.h>
#include <grpcpp/support/channel_arguments.h>

#include <memory>
#include <string>
#include <string_view>

#include "common/config.h"

namespace gradpress::transport {

inline constexpr char kAuthorizationKey[] = "authorization";  // gRPC metadata keys: lower case
inline constexpr char kTokenEnv[] = "GRADPRESS_TOKEN";

struct ServerSecurity {
  std::shared_ptr<grpc::ServerCredentials> credentials;
  std::string token;  // "" = none required
  bool tls = false, mutual = false;
  // What protects the port, for the start-up log line: "TLS (mutual), bearer token
  // required", "plaintext, no token: anyone who can reach :50051 can join", ...
  std::string Summary(int port) const;
  bool Warn() const { return !tls && !token.empty(); }  // a token in clear: log a warning
};

struct ClientSecurity {
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  std::string token;        // "" = none sent
  std::string header;       // "Bearer <token>"
  std::string server_name;  // TLS target name override, "" = none
  bool tls = false;
  // Sets the target name override on the channel arguments, if any.
  void Apply(grpc::ChannelArguments* args) const;
};

// $GRADPRESS_TOKEN if set and non-empty, else the trimmed content of token_file, else "".
std::string ResolveToken(const SecurityConfig& c);
ServerSecurity LoadServerSecurity(const SecurityConfig& c);
ClientSecurity LoadClientSecurity(const SecurityConfig& c);

// OK, or UNAUTHENTICATED "missing bearer token" / "bad bearer token". OK at once when
// `token` is empty.
grpc::Status CheckToken(const grpc::ServerContextBase& ctx, std::string_view token);
// Equality in time that depends only on the lengths.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace gradpress::transport
