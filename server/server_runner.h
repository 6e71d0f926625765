#pragma once
// ServerRunner: a ParameterStore behind a gRPC server, with the watchdog that drops silent
// workers. gradpress-server runs one; tests run one in-process on 127.0.0.1:0.
//
//   ServerRunner runner(store_options, /*deadline_s=*/120, config.security, faults);
//   int port = runner.Start("127.0.0.1:0");    // the bound port
//   ...;  runner.Stop(/*grace_s=*/5);          // stop accepting, finish in-flight, release
//
// Security (transport/security.h): the constructor reads the certificates and the token and
// throws InvalidArgument for files it cannot read or a token without TLS (unless
// allow_plaintext_token); Start logs one line saying what protects the port. faults: the
// server-side injected faults (transport/fault_injection.h), off by default.
// Stop: no new calls are accepted; calls in flight get grace_s to finish, after which
// barrier waits are woken with UNAVAILABLE. The standard gRPC health service is enabled and,
// as probes need, unauthenticated.
// Thread-safety: Start and Stop from one thread; store() is thread-safe.
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/config.h"
#include "server/parameter_service.h"
#include "server/parameter_store.h"
#include "transport/fault_injection.h"
#include "transport/security.h"

namespace grpc {
class Server;
}

namespace gradpress::server {

class ServerRunner {
 public:
  ServerRunner(StoreOptions options, double deadline_s, const SecurityConfig& security = {},
               transport::FaultOptions faults = {});
  ~ServerRunner();
  // Listens on `address` (host:port, port 0 picks one); returns the bound port. Throws
  // Unavailable if the address cannot be bound.
  int Start(const std::string& address);
  void Stop(double grace_s = 5.0);
  ParameterStore& store() { return store_; }
  // Handler threads not yet ended (0 once Stop has returned).
  int handler_threads() const { return service_.handler_threads(); }
  // Handlers queued or running: a call whose handler has returned holds no thread, even while
  // its reply is still being written.
  int handlers_busy() const { return service_.handlers_busy(); }
  // The dashboard's rows (from the pushes) and pages, for the HTTP port (server_main.cc).
  Dashboard& dashboard() { return dashboard_; }

 private:
  void Watchdog();
  const double timeout_s_;
  const transport::ServerSecurity security_;
  ParameterStore store_;
  Dashboard dashboard_;
  ParameterService service_;
  std::unique_ptr<grpc::Server> server_;
  std::thread watchdog_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

}  // namespace gradpress::server
