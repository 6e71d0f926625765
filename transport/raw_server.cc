#include "transport/raw_server.h"

#include <grpcpp/server_context.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>

#include "common/error.h"
#include "transport/status.h"

namespace gradpress::transport {
namespace {

std::atomic<int> g_running{0};

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
  Blocking(grpc::CallbackServerContext* ctx, RawHandler handler, const grpc::ByteBuffer* request,
           grpc::ByteBuffer* reply)
      : ctx_(ctx), request_(request), reply_(reply), sig_(std::make_shared<Signals>()) {
    if (g_running.fetch_add(1) < kMaxRawCalls) {
      threaded_ = true;  // before the thread: OnDone, after binding, reads it
      try {
        std::thread([this, sig = sig_, handler = std::move(handler)] {
          Run(sig, handler);
        }).detach();
        return;
      } catch (const std::system_error&) {  // no thread to be had: busy, as below
        threaded_ = false;
      }
    }
    g_running.fetch_sub(1);
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
    g_running.fetch_sub(1);
    delete this;
  }

  grpc::CallbackServerContext* const ctx_;
  const grpc::ByteBuffer* request_;  // server streaming: the request, until read
  grpc::ByteBuffer* reply_;          // client streaming: where the reply goes, until written
  const std::shared_ptr<Signals> sig_;
  bool threaded_ = false;
};

}  // namespace

grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* ServeBidi(
    grpc::CallbackServerContext* ctx, RawHandler handler) {
  return new Blocking<Bidi>(ctx, std::move(handler), nullptr, nullptr);
}

grpc::ServerReadReactor<grpc::ByteBuffer>* ServeClientStream(grpc::CallbackServerContext* ctx,
                                                             grpc::ByteBuffer* reply,
                                                             RawHandler handler) {
  return new Blocking<Reader>(ctx, std::move(handler), nullptr, reply);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ServeServerStream(grpc::CallbackServerContext* ctx,
                                                              const grpc::ByteBuffer* request,
                                                              RawHandler handler) {
  return new Blocking<Writer>(ctx, std::move(handler), request, nullptr);
}

int RawCallsRunning() { return g_running.load(); }

}  // namespace gradpress::transport
