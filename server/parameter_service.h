#pragma once
// ParameterService: the thin gRPC adapter over ParameterStore. Handlers only translate:
// proto -> store call -> proto. Payloads arrive and leave as 2 MiB chunks framed on raw
// byte buffers (transport/wire.h), the one wire path of every tensor method; every exception
// becomes a grpc::Status in Serve and nowhere else (transport/status.h), so bad input never
// takes the daemon down.
//
//   ParameterStore store(opts);  ParameterService service(&store, /*deadline_s=*/120);
//   builder.RegisterService(&service);
//
// Every handler first passes Admit, the one gate of the service: with a token
// (transport/security.h) a call without "authorization: Bearer <token>" metadata is refused
// UNAUTHENTICATED ("missing bearer token" / "bad bearer token") and counted as rejected
// {reason="unauthenticated"}; then the server's fault injector (transport/fault_injection.h)
// may answer UNAVAILABLE "injected fault" (counted in faults_injected). Neither touches the
// store's state. The grpc.health.v1 service is not behind the gate: probes send no metadata.
//
// Thread-safety: gRPC calls handlers concurrently; the store is thread-safe.
#include <grpcpp/server_context.h>
#include <grpcpp/support/byte_buffer.h>

#include <atomic>
#include <memory>
#include <string>

#include "proto/gradpress.grpc.pb.h"
#include "server/dashboard.h"
#include "server/parameter_store.h"
#include "transport/fault_injection.h"
#include "transport/raw_server.h"

namespace gradpress::server {

// The raw messages of one push stream, in order; Read returns false at its end. The service
// reads them from gRPC; fuzz/push_fuzz.cc hands it fuzzed bytes.
class PushFrameReader {
 public:
  virtual ~PushFrameReader() = default;
  virtual bool Read(grpc::ByteBuffer* frame) = 0;
};

// The service's push path (PushPull and Push): parses a PushHeader then TensorChunks
// (transport/wire.h) and streams them into store->BeginPush as views of the frames; returns
// the session's Commit(wait). Throws InvalidArgument for a malformed stream, and whatever
// BeginPush, Add and Commit throw.
// dashboard (optional) takes the rows the push's header carries once the store accepted it.
PushPullResult ReadPushStream(ParameterStore* store, PushFrameReader* frames,
                              Clock::time_point deadline, bool wait,
                              Dashboard* dashboard = nullptr);

// A whole push (InitWeights, PublishWeights): a PushHeader, then chunks until the stream
// ends, reassembled per key of `model` (transport/chunks.h). Throws InvalidArgument for a
// malformed stream, NotFound (not_registered) while the server has no model.
struct WholePush {
  proto::PushHeader header;
  std::vector<KeyPayload> payloads;
};
WholePush ReadWholePush(PushFrameReader* frames, const std::vector<TensorSpec>& model);

// What the gate checks: a bearer token ("" = none) and the server-side injected faults.
struct ServiceGate {
  std::string token;
  transport::FaultOptions faults;
};

// The generated service with its six tensor methods bound as raw callback methods: their
// messages are grpc::ByteBuffers (transport/wire.h), read and written by blocking handlers
// (transport/raw_server.h). The five small unary methods stay the generated sync ones.
using RawParameterServer = proto::ParameterServer::WithRawCallbackMethod_InitWeights<
    proto::ParameterServer::WithRawCallbackMethod_PullWeights<
        proto::ParameterServer::WithRawCallbackMethod_PushPull<
            proto::ParameterServer::WithRawCallbackMethod_Push<
                proto::ParameterServer::WithRawCallbackMethod_Pull<
                    proto::ParameterServer::WithRawCallbackMethod_PublishWeights<
                        proto::ParameterServer::Service>>>>>>;

class ParameterService final : public RawParameterServer {
 public:
  // deadline_s bounds how long a push waits at the barrier (the client's deadline, if
  // earlier, wins).
  // dashboard (optional): where the rows that pushes carry go.
  ParameterService(ParameterStore* store, double deadline_s, ServiceGate gate = {},
                   Dashboard* dashboard = nullptr);
  // Waits (at most 10 s) for the handler threads, so none outlives the service.
  ~ParameterService() override;

  // Joins the tensor methods' handler threads (call after the gRPC server has shut down, when
  // every call is done); true when all ended by `deadline`, else the rest are left detached.
  bool JoinHandlers(TaskThreads::Clock::time_point deadline) { return handlers_.Join(deadline); }
  int handler_threads() const { return handlers_.alive(); }
  int handlers_busy() const { return handlers_.busy(); }  // handlers queued or running

  grpc::Status Register(grpc::ServerContext* ctx, const proto::RegisterRequest* req,
                        proto::RegisterReply* reply) override;
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const proto::HeartbeatRequest* req,
                         proto::HeartbeatReply* reply) override;
  grpc::Status Stats(grpc::ServerContext* ctx, const proto::StatsRequest* req,
                     proto::StatsReply* reply) override;
  grpc::Status Elect(grpc::ServerContext* ctx, const proto::ElectRequest* req,
                     proto::ElectReply* reply) override;
  grpc::Status Broadcast(grpc::ServerContext* ctx, const proto::BroadcastRequest* req,
                         proto::BroadcastReply* reply) override;

  // The tensor methods. Pushes stream into the store piece by piece (ParameterStore::BeginPush)
  // as views of the received slices; results are written as views of the step's result,
  // which the slices keep alive. No copy of tensor bytes in user space on the step's path.
  using Ctx = grpc::CallbackServerContext;
  grpc::ServerReadReactor<grpc::ByteBuffer>* InitWeights(Ctx* ctx,
                                                         grpc::ByteBuffer* reply) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* PullWeights(Ctx* ctx,
                                                          const grpc::ByteBuffer* req) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* PushPull(Ctx* ctx) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* Push(Ctx* ctx, grpc::ByteBuffer* reply) override;
  grpc::ServerWriteReactor<grpc::ByteBuffer>* Pull(Ctx* ctx, const grpc::ByteBuffer* req) override;
  grpc::ServerReadReactor<grpc::ByteBuffer>* PublishWeights(Ctx* ctx,
                                                            grpc::ByteBuffer* reply) override;

 private:
  // Every handler's frame: the gate, then `body`; any exception becomes the call's status
  // (transport/status.h). The one place errors are mapped.
  template <typename Fn>
  grpc::Status Serve(const grpc::ServerContextBase& ctx, Fn&& body);
  // Reads a push stream into the store; the session's Commit(wait) result.
  PushPullResult StreamPush(const grpc::ServerContextBase& ctx, transport::RawStream* stream,
                            bool wait);
  Clock::time_point Deadline(const grpc::ServerContextBase& ctx) const;
  // The token check and the injected server faults, before any handler's work.
  grpc::Status Admit(const grpc::ServerContextBase& ctx);
  ParameterStore* store_;
  Dashboard* dashboard_;
  double deadline_s_;
  const std::string token_;
  std::unique_ptr<transport::FaultInjector> faults_;  // null: no server-side faults
  std::atomic<uint64_t> refused_{0};
  // The tensor methods' handlers run here (transport/raw_server.h); last, so it ends first.
  TaskThreads handlers_{transport::kMaxRawCalls, std::chrono::seconds(30), "gp-handler"};
};

}  // namespace gradpress::server
