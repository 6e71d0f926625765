#include "server/server_runner.h"

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <future>

#include "common/error.h"
#include "transport/grpc_process.h"

namespace gradpress::server {

ServerRunner::ServerRunner(StoreOptions options, double deadline_s, const SecurityConfig& security,
                           transport::FaultOptions faults)
    : timeout_s_(options.worker_timeout_s),
      security_(transport::LoadServerSecurity(security)),
      store_(options),
      dashboard_({"", security_.token, options.shard, options.shards}, &store_),
      service_(&store_, deadline_s, ServiceGate{security_.token, faults}, &dashboard_) {
  if (faults.ServerSide()) spdlog::warn("injected faults on: {}", faults.ToString());
}

ServerRunner::~ServerRunner() { Stop(0.0); }

int ServerRunner::Start(const std::string& address) {
  transport::ConfigureGrpcProcess();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(address, security_.credentials, &port);
  builder.RegisterService(&service_);
  server_ = builder.BuildAndStart();
  GP_ENFORCE_AS(Unavailable, server_ != nullptr && port != 0, "cannot listen on '", address,
                "' (address in use or malformed)");
  watchdog_ = std::thread([this] { Watchdog(); });
  spdlog::info("gradpress-server listening on {} (port {})", address, port);
  if (security_.Warn()) {
    spdlog::warn("security: {}", security_.Summary(port));
  } else {
    spdlog::info("security: {}", security_.Summary(port));
  }
  return port;
}

void ServerRunner::Watchdog() {
  const auto period = std::chrono::duration<double>(std::clamp(timeout_s_ / 4, 0.01, 1.0));
  std::unique_lock<std::mutex> lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
    lock.unlock();
    store_.CheckTimeouts();
    lock.lock();
  }
}

void ServerRunner::Stop(double grace_s) {
  if (!server_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(grace_s));
  auto done = std::async(std::launch::async, [&] { server_->Shutdown(deadline); });
  if (done.wait_for(std::chrono::duration<double>(grace_s)) != std::future_status::ready) {
    store_.Shutdown();  // wake barrier waits so their calls can end
  }
  done.wait();
  store_.Shutdown();
  server_->Wait();
  // Every call is done; its handler thread only has to wake and let the call go. Bounded
  // anyway, so a stuck handler cannot hang the shutdown.
  if (!service_.JoinHandlers(TaskThreads::Clock::now() + std::chrono::seconds(10)))
    spdlog::warn("{} handler threads still running 10 s after shutdown; left detached",
                 service_.handler_threads());
  server_.reset();
  spdlog::info("gradpress-server stopped");
}

}  // namespace gradpress::server
