#pragma once
// The security tests' credentials: an openssl-made PKI (made once per test process) and a
// bearer token file with the TLS settings of a server and a client that use them.
#include <string>

#include "common/config.h"
#include "tests/transport/harness.h"
#include "transport/security.h"

namespace gradpress::testing {

// A CA, a server certificate for IP:127.0.0.1 and DNS:localhost, a client certificate, and a
// second "wrong" CA with its own client certificate, made once per test process.
struct Pki {
  TempDir dir;
  std::string ca, server_cert, server_key, client_cert, client_key;
  std::string wrong_ca, wrong_client_cert, wrong_client_key;

  static const Pki& Get() {
    static Pki pki;
    return pki;
  }

 private:
  Pki() {
    const std::string d = dir.path();
    auto path = [&](const std::string& n) { return d + "/" + n; };
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    auto run = [&](const std::string& cmd) {
      const std::string full = "cd " + d + " && " + cmd + " >>openssl.log 2>&1";
      INFO(full);
      REQUIRE(std::system(full.c_str()) == 0);
    };
    auto make_ca = [&](const std::string& name) {
      run("openssl req -x509 " + key + " -keyout " + name + ".key -out " + name +
          ".pem -days 2 -subj '/CN=gradpress test " + name +
          "' -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign");
    };
    auto make_leaf = [&](const std::string& name, const std::string& ca_name, const std::string& cn,
                         const std::string& ext) {
      std::ofstream(path(name + ".ext")) << ext;
      run("openssl req " + key + " -keyout " + name + ".key -out " + name +
          ".csr -subj '/CN=" + cn + "'");
      run("openssl x509 -req -in " + name + ".csr -CA " + ca_name + ".pem -CAkey " + ca_name +
          ".key -CAcreateserial -days 2 -out " + name + ".pem -extfile " + name + ".ext");
    };
    make_ca("ca");
    make_ca("wrong_ca");
    make_leaf("server", "ca", "localhost",
              "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n");
    make_leaf("client", "ca", "worker", "extendedKeyUsage=clientAuth\n");
    make_leaf("wrong_client", "wrong_ca", "worker", "extendedKeyUsage=clientAuth\n");
    ca = path("ca.pem");
    server_cert = path("server.pem");
    server_key = path("server.key");
    client_cert = path("client.pem");
    client_key = path("client.key");
    wrong_ca = path("wrong_ca.pem");
    wrong_client_cert = path("wrong_client.pem");
    wrong_client_key = path("wrong_client.key");
  }
};

constexpr char kToken[] = "s3cret-token-0123456789";

struct Secure {
  TempDir dir;
  std::string token_file = dir.File("token", std::string("  ") + kToken + "\n");
  ScopedEnv no_env{transport::kTokenEnv, nullptr};

  SecurityConfig Server(bool mutual = false, bool token = true) const {
    const Pki& pki = Pki::Get();
    SecurityConfig s;
    s.tls = true;
    s.cert = pki.server_cert;
    s.key = pki.server_key;
    if (mutual) s.client_ca = pki.ca;
    if (token) s.token_file = token_file;
    return s;
  }
  SecurityConfig Client(bool token = true) const {
    SecurityConfig s;
    s.tls = true;
    s.ca = Pki::Get().ca;
    if (token) s.token_file = token_file;
    return s;
  }
};

}  // namespace gradpress::testing
