#pragma once
// GrpcPsClient's insides: the channel and stubs, the background heartbeats, and one attempt's
// context and retry loop, shared by grpc_ps_client.cc (the unary calls) and
// grpc_tensor_calls.cc (the streamed calls that carry tensors). Not part of the public API.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "common/error.h"
#include "common/shape.h"
#include "proto/gradpress.grpc.pb.h"
#include "transport/fault_injection.h"
#include "transport/security.h"
#include "worker/client/grpc_ps_client.h"
#include "worker/client/grpc_wire.h"

namespace gradpress::worker {

using compressors::KeyPayload;

struct GrpcPsClient::Impl {
  ~Impl() { StopHeartbeats(); }
  void StopHeartbeats() {
    {
      std::lock_guard<std::mutex> lock(hb_mu);
      hb_stop = true;
    }
    hb_cv.notify_all();
    if (hb_thread.joinable()) hb_thread.join();
  }
  std::mutex hb_mu;
  std::condition_variable hb_cv;
  bool hb_stop = false;
  std::thread hb_thread;
  transport::ClientSecurity security;
  std::unique_ptr<transport::FaultInjector> faults;  // null: none injected
  std::atomic<uint64_t> retries{0};
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<proto::ParameterServer::Stub> stub;  // the unary methods
  std::unique_ptr<grpc::GenericStub> raw;              // the tensor methods (raw_client.h)
};

// A fresh context for one attempt: the deadline and the bearer token.
inline void PrepareContext(const GrpcPsClient::Impl& impl, const ClientOptions& opt,
                           grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() +
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(
                        std::chrono::duration<double>(opt.deadline_s)));
  if (!impl.security.header.empty())
    ctx->AddMetadata(transport::kAuthorizationKey, impl.security.header);
}

// The error after the last attempt: the call, the attempts, the server, and for TLS a hint.
std::string GaveUpMessage(const GrpcPsClient::Impl& impl, const ClientOptions& opt,
                          const char* what, int attempts, const std::string& last);

// Runs `call` (one RPC attempt, fresh context each time) with retries on Unavailable, after
// the injected faults of the attempt. *retries (if given) counts the retried attempts.
template <typename Fn>
auto WithRetry(GrpcPsClient::Impl& impl, const ClientOptions& opt, const char* what, Fn&& call,
               int* retries = nullptr) -> decltype(call(nullptr)) {
  double backoff = opt.backoff_initial_s;
  for (int attempt = 0;; ++attempt) {
    grpc::ClientContext ctx;
    PrepareContext(impl, opt, &ctx);
    try {
      if (impl.faults) {
        const transport::FaultInjector::Attempt a = impl.faults->NextAttempt();
        if (a.delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.delay_ms));
        if (a.drop) throw Unavailable(std::string(what) + ": injected fault: request dropped");
        if (a.drop_reply) {
          call(&ctx);  // ran on the server; its answer is lost
          throw Unavailable(std::string(what) + ": injected fault: reply dropped");
        }
      }
      return call(&ctx);
    } catch (const Unavailable& e) {
      if (attempt >= opt.max_retries)
        throw Unavailable(GaveUpMessage(impl, opt, what, attempt + 1, e.what()));
      impl.retries.fetch_add(1, std::memory_order_relaxed);
      if (retries) ++*retries;
      spdlog::warn("{} {}: {}; retry {} in {:.2f} s", opt.worker_id, what, e.what(), attempt + 1,
                   backoff);
      std::this_thread::sleep_for(std::chrono::duration<double>(backoff));
      backoff = std::min(backoff * 2, opt.backoff_max_s);
    }
  }
}

}  // namespace gradpress::worker
