#pragma once
// Blocking handlers for the generated raw callback methods. The tensor methods of the service
// are bound through gRPC's generated `WithRawCallbackMethod_<Name>` templates (the method
// index comes from the generated code, so reordering the .proto's rpcs cannot rebind them);
// their messages are grpc::ByteBuffers framed by transport/wire.h. A callback reactor must
// never block, while the store's calls do (a push waits at the step's barrier), so each call
// runs its handler on a thread of the service's TaskThreads (common/task_threads.h: reused
// across calls, a new one whenever all are busy, since a thread per call cost more than a LeNet
// push; the service joins them at shutdown) and sees the call as a blocking stream:
//
//   grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* PushPull(
//       grpc::CallbackServerContext* ctx) override {
//     return transport::ServeBidi(ctx, &handlers_,  // TaskThreads handlers_{kMaxRawCalls}
//                                 [this](grpc::CallbackServerContext* c, RawStream* s) {
//       ... s->Read(&frame) ... s->Write(frame) ...;  return grpc::Status::OK;
//     });
//   }
//
// Client streaming (one reply): the handler's first Write is the reply. Server streaming (one
// request): the first Read returns the request, the next false. An exception escaping the
// handler becomes a status through ToStatus (transport/status.h). The handler's return frees
// its thread at once: the status follows the writes still queued, sent by gRPC's threads.
// At most the TaskThreads' max_busy (kMaxRawCalls) handlers run at once; a call beyond that,
// or after the threads were joined, is answered UNAVAILABLE ("server busy", reason timed_out:
// retry) without a thread.
// Thread-safety: Read and Write are called from the handler's thread only.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

#include <functional>

#include "common/task_threads.h"

namespace grpc {
class CallbackServerContext;
}

namespace gradpress::transport {

// One call's messages, seen from its handler's thread.
class RawStream {
 public:
  virtual ~RawStream() = default;
  // The next message from the client; false once the client has half-closed (or the call died).
  // Messages are read ahead of the caller (a few), so a burst wakes it once, not per message.
  virtual bool Read(grpc::ByteBuffer* msg) = 0;
  // Queues a message to send (waits only while a few are queued); false once the call is
  // dead. The call's status is sent after every queued message.
  virtual bool Write(const grpc::ByteBuffer& msg) = 0;
};

using RawHandler = std::function<grpc::Status(grpc::CallbackServerContext*, RawStream*)>;

constexpr int kMaxRawCalls = 1024;

// `threads` runs the handler; it outlives the call (the service's, joined at shutdown).
grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ServeBidi(
    grpc::CallbackServerContext* ctx, TaskThreads* threads, RawHandler handler);
grpc::ServerReadReactor<grpc::ByteBuffer>* ServeClientStream(grpc::CallbackServerContext* ctx,
                                                             TaskThreads* threads,
                                                             grpc::ByteBuffer* reply,
                                                             RawHandler handler);
grpc::ServerWriteReactor<grpc::ByteBuffer>* ServeServerStream(grpc::CallbackServerContext* ctx,
                                                              TaskThreads* threads,
                                                              const grpc::ByteBuffer* request,
                                                              RawHandler handler);

// Handlers queued or running now, over every server in the process.
int RawCallsRunning();

}  // namespace gradpress::transport
