#pragma once
// The client half of the raw tensor methods: a blocking call over gRPC's generic stub, whose
// messages are grpc::ByteBuffers framed by transport/wire.h (the same bytes as the generated
// stub's messages). Every rpc kind is driven as a bidirectional stream: write the request(s),
// WritesDone, read the reply(ies), Finish; on the wire that is exactly the kind's call.
//
//   grpc::GenericStub stub(channel);
//   RawCall call(&stub, MethodPath("PushPull"), &ctx);
//   call.Write(frame) ...;  call.WritesDone();  while (call.Read(&frame)) ...;
//   ThrowIfError(call.Finish(), "PushPull");
//
// A call dropped before Finish (an exception) is cancelled and drained by the destructor.
// Thread-safety: one thread per RawCall; the stub is thread-safe.
#include <grpcpp/completion_queue.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include <memory>
#include <string>
#include <string_view>

namespace gradpress::transport {

// "/gradpress.proto.ParameterServer/<name>", looked up in the generated descriptor of the
// service, so a renamed or removed rpc fails loudly (Internal) instead of calling a path the
// server does not serve.
const std::string& MethodPath(std::string_view name);

class RawCall {
 public:
  RawCall(grpc::GenericStub* stub, const std::string& path, grpc::ClientContext* ctx);
  ~RawCall();
  RawCall(const RawCall&) = delete;
  RawCall& operator=(const RawCall&) = delete;

  // Sends a message; false once the call has ended (Finish says why).
  bool Write(const grpc::ByteBuffer& msg);
  // The client's half-close.
  void WritesDone();
  // The next message from the server; false at the end of the replies.
  bool Read(grpc::ByteBuffer* msg);
  // The call's status; call once, after the last Read.
  grpc::Status Finish();

 private:
  bool Wait();  // the one pending operation's outcome
  grpc::ClientContext* ctx_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  bool alive_ = false, writes_done_ = false, finished_ = false;
};

}  // namespace gradpress::transport
