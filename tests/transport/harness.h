#pragma once
// Test harness of tests/transport: a ServerRunner with security and faults on 127.0.0.1:0,
// gRPC clients as threads, temp files and environment scopes (the PKI: tests/transport/pki.h).
#include <stdlib.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/config.h"
#include "common/error.h"
#include "compressors/registry.h"
#include "server/server_runner.h"
#include "tests/catch_torch.h"
#include "tests/server/cluster.h"
#include "transport/fault_injection.h"
#include "worker/client/grpc_ps_client.h"

namespace gradpress::testing {

using compressors::TensorSpec;

// Sets (or with nullptr unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old, had_ = true;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { had_ ? setenv(name_.c_str(), old_.c_str(), 1) : unsetenv(name_.c_str()); }

 private:
  std::string name_, old_;
  bool had_ = false;
};

// A fresh directory under /tmp, removed with everything in it at the end of the scope.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/gp_transport_test_XXXXXX";
    REQUIRE(mkdtemp(name) != nullptr);
    path_ = name;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string File(const std::string& name, const std::string& text) const {
    const std::string p = path_ + "/" + name;
    std::ofstream(p) << text;
    return p;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// An in-process server with the given security and faults (Specs, Zeros and Cluster::Parallel
// from tests/server/cluster.h).
struct SecureCluster {
  explicit SecureCluster(server::StoreOptions opts, const SecurityConfig& security = {},
                         transport::FaultOptions faults = {})
      : runner(std::move(opts), /*deadline_s=*/30, security, faults) {
    port = runner.Start("127.0.0.1:0");
  }
  ~SecureCluster() { runner.Stop(1.0); }

  worker::ClientOptions Client(int i, const SecurityConfig& security = {},
                               const std::string& push = "none") const {
    worker::ClientOptions o;
    o.server = "127.0.0.1:" + std::to_string(port);
    o.worker_id = "worker-" + std::to_string(i);
    o.push = ParseCodecShorthand(push);
    o.deadline_s = 30;
    o.max_retries = 2;
    o.backoff_initial_s = 0.001;
    o.backoff_max_s = 0.01;
    o.security = security;
    return o;
  }

  // Runs fn(i) on n threads and joins them; rethrows the first failure.
  static void Parallel(int n, const std::function<void(int)>& fn) { Cluster::Parallel(n, fn); }

  server::ServerRunner runner;
  int port = 0;
};

// The message of the gradpress::Error `f` throws ("(no error)" if none).
inline std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace gradpress::testing
