#pragma once
// Stopping a server at a known step in the trainer tests: StepGate holds every client's
// exchange of one step until the test opens it, and GatedClient is the gRPC client that passes
// the gate first (TrainerOptions.make_client). Thread-safety: StepGate is thread-safe.
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/server/cluster.h"
#include "tests/wait_for.h"
#include "worker/client/grpc_ps_client.h"

namespace gradpress::testing {

// Holds each client's exchange of step `at` (its first attempt) until Open(), so that the test
// stops a server at a known step while every worker is about to push; then tells when the
// clients have met the dead server (a retried call). A client is a worker's connection to one
// server: with sharded servers a worker has one per shard.
class StepGate {
 public:
  explicit StepGate(int64_t at) : at_(at) {}
  // A worker's client calls this before each exchange.
  void Pass(const std::string& worker, int64_t step, const worker::GrpcPsClient& client) {
    if (step != at_) return;
    std::unique_lock<std::mutex> lock(mu_);
    const std::string key = worker + "@" + client.options().server;
    if (!arrived_.count(key)) arrived_[key] = {&client, client.retries()};
    cv_.notify_all();
    cv_.wait(lock, [&] { return open_; });
  }
  // A client going away (its Trainer ends).
  void Forget(const worker::GrpcPsClient& client) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [name, a] : arrived_)
      if (a.client == &client) a.client = nullptr;
  }
  bool WaitArrived(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWaitTimeout, [&] { return arrived_.size() >= n; });
  }
  void Open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Clients that retried a call since they reached the gate.
  size_t Retried() {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [name, a] : arrived_) n += a.client && a.client->retries() > a.retries;
    return n;
  }

 private:
  struct Arrival {
    const worker::GrpcPsClient* client;
    uint64_t retries;  // at the gate
  };
  const int64_t at_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, Arrival> arrived_;  // by worker@server
  bool open_ = false;
};

// The gRPC client, its exchanges passing the gate first.
class GatedClient : public worker::GrpcPsClient {
 public:
  GatedClient(const worker::ClientOptions& o, worker::KeyCodecs* codecs, StepGate* gate)
      : GrpcPsClient(o, codecs), gate_(gate) {}
  ~GatedClient() override { gate_->Forget(*this); }
  using GrpcPsClient::PushPull;
  worker::StepMetrics PushPull(const worker::StepCall& call,
                               const std::vector<torch::Tensor>& grads,
                               std::vector<torch::Tensor>* out) override {
    gate_->Pass(options().worker_id, call.step, *this);
    return GrpcPsClient::PushPull(call, grads, out);
  }

 private:
  StepGate* gate_;
};

// The workers of a restart test: fn(rank) for each of n workers (Cluster::Parallel) on a thread
// of their own, while the test's main thread stops and starts servers. Leaving the scope any
// way opens the gate and joins, so a failed REQUIRE never leaves the workers blocked.
class GatedWorkers {
 public:
  GatedWorkers(StepGate* gate, int n, std::function<void(int)> fn)
      : gate_(gate), thread_([this, n, fn = std::move(fn)] {
          try {
            Cluster::Parallel(n, fn);
          } catch (...) {
            failed_ = std::current_exception();
          }
        }) {}
  ~GatedWorkers() {
    gate_->Open();
    if (thread_.joinable()) thread_.join();
  }
  // Waits for every worker; rethrows the first failure.
  void Join() {
    thread_.join();
    if (failed_) std::rethrow_exception(failed_);
  }

 private:
  StepGate* gate_;
  std::exception_ptr failed_;
  std::thread thread_;
};

}  // namespace gradpress::testing
