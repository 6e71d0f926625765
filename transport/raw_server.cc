#include "transport/raw_server.h"

#include <grpcpp/server_context.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <type_traits>

#include "common/error.h"
#include "transport/status.h"

namespace gradpress::transport {
namespace {

// Handlers queued or running, over every server in the process (RawCallsRunning).
std::atomic<int> running_calls{0};

// Completion of one kind of operation (a read, a write, the whole call), handed from gRPC's
// reaction threads to the handler's thread. Shared, so a reaction that signals never touches
// a reactor the handler's thread may already have deleted.
struct Signals {
  struct Op {
    bool done = false, ok = false;
  };
  std::mutex mu;
  std::condition_variable cv;
  Op read, write, call;
  void Set(Op* op, bool ok) {
    {
      std::lock_guard<std::mutex> lock(mu);
      op->done = true;
      op->ok = ok;
    }
    cv.notify_all();
  }
  bool Wait(Op* op) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return op->done; });
    op->done = false;
    return op->ok;
  }
};

using Bidi = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;
using Reader = grpc::ServerReadReactor<grpc::ByteBuffer>;
using Writer = grpc::ServerWriteReactor<grpc::ByteBuffer>;

// One call: a reactor whose handler runs on its own thread. That thread finishes the call,
// waits for OnDone (gRPC is then done with the reactor) and deletes it.
template <typename Reactor>
class Blocking final : public Reactor, public RawStream {
  static constexpr bool kReads = !std::is_same_v<Reactor, Writer>;   // the client streams
  static constexpr bool kWrites = !std::is_same_v<Reactor, Reader>;  // the server streams

 public:
  Blocking(grpc::CallbackServerContext* ctx, TaskThreads* threads, RawHandler handler,
           const grpc::ByteBuffer* request, grpc::ByteBuffer* reply)
      : ctx_(ctx), request_(request), reply_(reply), sig_(std::make_shared<Signals>()) {
    threaded_ = true;  // before the task: OnDone, after binding, reads it
    ++running_calls;
    if (threads->Run([this, sig = sig_, handler = std::move(handler)] { Run(sig, handler); }))
      return;
    --running_calls;
    threaded_ = false;
    this->Finish(ToStatus(std::make_exception_ptr(
        Unavailable("server busy: too many calls in flight; retry", Reason::kTimedOut))));
  }

  bool Read(grpc::ByteBuffer* msg) override {
    if constexpr (kReads) {
      this->StartRead(msg);
      return sig_->Wait(&sig_->read);
    } else {
      if (request_ == nullptr) return false;
      *msg = *request_;
      request_ = nullptr;
      return true;
    }
  }

  bool Write(const grpc::ByteBuffer& msg) override {
    if constexpr (kWrites) {
      this->StartWrite(&msg);
      return sig_->Wait(&sig_->write);
    } else {
      GP_ENFORCE_AS(Internal, reply_ != nullptr, "a call with one reply was written twice");
      *reply_ = msg;
      reply_ = nullptr;
      return true;
    }
  }

  // Reactions (gRPC's threads). OnReadDone and OnWriteDone exist only in the reactors that
  // read or write; in the others these are plain members nobody calls.
  void OnReadDone(bool ok) { sig_->Set(&sig_->read, ok); }
  void OnWriteDone(bool ok) { sig_->Set(&sig_->write, ok); }
  void OnDone() override {
    if (!threaded_) {
      delete this;
      return;
    }
    std::shared_ptr<Signals> sig = sig_;  // `this` may be gone once the handler's thread wakes
    sig->Set(&sig->call, true);
  }

 private:
  void Run(const std::shared_ptr<Signals>& sig, const RawHandler& handler) {
    grpc::Status status;
    try {
      status = handler(ctx_, this);
    } catch (...) {
      status = ToStatus(std::current_exception());
    }
    this->Finish(std::move(status));
    sig->Wait(&sig->call);
    delete this;
    --running_calls;
  }

  grpc::CallbackServerContext* const ctx_;
  const grpc::ByteBuffer* request_;  // server streaming: the request, until read
  grpc::ByteBuffer* reply_;          // client streaming: where the reply goes, until written
  const std::shared_ptr<Signals> sig_;
  bool threaded_ = false;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ServeBidi(
    grpc::CallbackServerContext* ctx, TaskThreads* threads, RawHandler handler) {
  return new Blocking<Bidi>(ctx, threads, std::move(handler), nullptr, nullptr);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ServeClientStream(grpc::CallbackServerContext* ctx,
                                                             TaskThreads* threads,
                                                             grpc::ByteBuffer* reply,
                                                             RawHandler handler) {
  return new Blocking<Reader>(ctx, threads, std::move(handler), nullptr, reply);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ServeServerStream(grpc::CallbackServerContext* ctx,
                                                              TaskThreads* threads,
                                                              const grpc::ByteBuffer* request,
                                                              RawHandler handler) {
  return new Blocking<Writer>(ctx, threads, std::move(handler), request, nullptr);
}

int RawCallsRunning() { return running_calls.load(); }

}  // namespace gradpress::transport
