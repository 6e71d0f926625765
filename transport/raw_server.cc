#include "transport/raw_server.h"

#include <grpcpp/server_context.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <type_traits>

#include "common/error.h"
#include "transport/status.h"

namespace gradpress::transport {
namespace {

constexpr auto kIdleExit = std::chrono::seconds(30);

// The threads that run handlers. A thread is reused for the next call (a step's calls are
// short: starting a thread per call cost more than a LeNet push); one is started whenever
// every thread is busy, so a handler never waits behind another (they block on each other at
// the barrier); a thread idle for kIdleExit ends. Never destroyed: threads may be parked in
// it when the process exits.
class HandlerThreads {
 public:
  static HandlerThreads& Get() {
    static auto* threads = new HandlerThreads;
    return *threads;
  }
  // False (nothing runs) at kMaxRawCalls busy, or when no thread can be started.
  bool Run(std::function<void()> task) {
    std::lock_guard<std::mutex> lock(mu_);
    if (busy_ >= kMaxRawCalls) return false;
    if (available_ <= tasks_.size()) {  // every available thread already has a task coming
      try {
        std::thread([this] { Loop(); }).detach();
      } catch (const std::system_error&) {
        return false;
      }
      ++available_;
    }
    ++busy_;
    tasks_.push_back(std::move(task));
    cv_.notify_one();
    return true;
  }
  int busy() {
    std::lock_guard<std::mutex> lock(mu_);
    return busy_;
  }

 private:
  void Loop() {  // counted in available_ from its start
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (!cv_.wait_for(lock, kIdleExit, [&] { return !tasks_.empty(); })) {
        --available_;
        return;
      }
      --available_;
      std::function<void()> task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      task = nullptr;  // the call's state goes before the thread is offered again
      lock.lock();
      --busy_;
      ++available_;
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  size_t available_ = 0;  // threads waiting for a task, or started and about to
  int busy_ = 0;          // tasks queued or running
};

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
    threaded_ = true;  // before the task: OnDone, after binding, reads it
    if (HandlerThreads::Get().Run(
            [this, sig = sig_, handler = std::move(handler)] { Run(sig, handler); })) {
      return;
    }
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

int RawCallsRunning() { return HandlerThreads::Get().busy(); }

}  // namespace gradpress::transport
