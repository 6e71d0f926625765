#include "transport/raw_server.h"

#include <grpcpp/server_context.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <type_traits>

#include "common/error.h"
#include "transport/status.h"

namespace gradpress::transport {
namespace {

// Handlers queued or running, over every server in the process (RawCallsRunning).
std::atomic<int> running_calls{0};

// Messages read ahead and written behind, and the call's end, handed between gRPC's
// reaction threads and the handler's thread. A handler wakes when it needs a message that
// has not arrived, or when too many writes are queued, not once per message. Part of the
// reactor: it is deleted only once both the handler's thread and gRPC are done with it.
struct Signals {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<grpc::ByteBuffer> inbox;  // read, not yet taken by the handler
  bool reading = false, read_end = false;
  std::deque<grpc::ByteBuffer> outbox;  // front: being written; the rest: queued
  bool write_failed = false;
  // The end: the handler has returned `status` (handler_done); Finish is called once, by the
  // handler's thread or by the OnWriteDone that empties the outbox (finishing); the reactor is
  // deleted by the later of OnDone (call_done) and the handler's thread letting go of it
  // (released). gRPC calls OnDone only after Finish, so never while the handler runs.
  grpc::Status status;
  bool handler_done = false, finishing = false, released = false, call_done = false;
};

// Reads queued ahead of the handler, and writes queued behind it, at most: each message is at
// most kChunkBytes (transport/chunks.h), so a call holds at most 16 of them in memory.
constexpr size_t kReadAhead = 8;
constexpr size_t kWriteBehind = 8;

using Bidi = grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>;
using Reader = grpc::ServerReadReactor<grpc::ByteBuffer>;
using Writer = grpc::ServerWriteReactor<grpc::ByteBuffer>;

// One call: a reactor whose handler runs on a thread of the pool. The handler's thread never
// waits for the call's end: the call is finished after its queued writes (by that thread when
// none is left, else by the last OnWriteDone), and the reactor deleted by the later of OnDone
// (gRPC is then done with it) and the handler's return, so the thread goes back to the pool
// at once instead of sleeping twice more per call.
template <typename Reactor>
class Blocking final : public Reactor, public RawStream {
  static constexpr bool kReads = !std::is_same_v<Reactor, Writer>;   // the client streams
  static constexpr bool kWrites = !std::is_same_v<Reactor, Reader>;  // the server streams

 public:
  Blocking(grpc::CallbackServerContext* ctx, TaskThreads* threads, RawHandler handler,
           const grpc::ByteBuffer* request, grpc::ByteBuffer* reply)
      : ctx_(ctx), request_(request), reply_(reply) {
    threaded_ = true;  // before the task: OnDone, after binding, reads it
    ++running_calls;
    if (threads->Run([this, handler = std::move(handler)] { Run(handler); })) return;
    --running_calls;
    threaded_ = false;
    this->Finish(ToStatus(std::make_exception_ptr(
        Unavailable("server busy: too many calls in flight; retry", Reason::kTimedOut))));
  }

  bool Read(grpc::ByteBuffer* msg) override {
    if constexpr (kReads) {
      std::unique_lock<std::mutex> lock(sig_.mu);
      if (ClaimRead()) StartReadUnlocked(&lock);
      sig_.cv.wait(lock, [&] { return !sig_.inbox.empty() || sig_.read_end; });
      if (sig_.inbox.empty()) return false;
      *msg = std::move(sig_.inbox.front());
      sig_.inbox.pop_front();
      if (ClaimRead()) StartReadUnlocked(&lock);  // the next one while the handler works
      return true;
    } else {
      if (request_ == nullptr) return false;
      *msg = *request_;
      request_ = nullptr;
      return true;
    }
  }

  bool Write(const grpc::ByteBuffer& msg) override {
    if constexpr (kWrites) {
      std::unique_lock<std::mutex> lock(sig_.mu);
      sig_.cv.wait(lock, [&] { return sig_.outbox.size() < kWriteBehind || sig_.write_failed; });
      if (sig_.write_failed) return false;
      sig_.outbox.push_back(msg);               // a reference to the same slices: no bytes copied
      if (sig_.outbox.size() > 1) return true;  // OnWriteDone starts it
      const grpc::ByteBuffer* first = &sig_.outbox.front();  // stays put: only OnWriteDone pops
      lock.unlock();
      this->StartWrite(first);
      return true;
    } else {
      GP_ENFORCE_AS(Internal, reply_ != nullptr, "a call with one reply was written twice");
      *reply_ = msg;
      reply_ = nullptr;
      return true;
    }
  }

  // Reactions (gRPC's threads). OnReadDone and OnWriteDone exist only in the reactors that
  // read or write; in the others these are plain members nobody calls. No Start* is called
  // with the lock held: gRPC may run the reaction it completes inline, on the caller's thread.
  void OnReadDone(bool ok) {
    std::unique_lock<std::mutex> lock(sig_.mu);
    sig_.reading = false;
    if (ok) {
      sig_.inbox.push_back(std::move(incoming_));
      incoming_.Clear();
    } else {
      sig_.read_end = true;  // half-closed, or the call died
    }
    const bool more = ClaimRead();
    sig_.cv.notify_all();
    if (more) StartReadUnlocked(&lock);
  }
  void OnWriteDone(bool ok) {
    std::unique_lock<std::mutex> lock(sig_.mu);
    sig_.outbox.pop_front();
    if (!ok) {
      sig_.write_failed = true;
      sig_.outbox.clear();
    }
    const grpc::ByteBuffer* next = sig_.outbox.empty() ? nullptr : &sig_.outbox.front();
    const bool finish = ClaimFinish();
    sig_.cv.notify_all();
    lock.unlock();
    if (next != nullptr) this->StartWrite(next);
    if (finish) this->Finish(sig_.status);  // the handler has returned: status is settled
  }
  void OnDone() override {
    if (!threaded_) {
      delete this;
      return;
    }
    bool last;
    {
      std::lock_guard<std::mutex> lock(sig_.mu);
      sig_.call_done = true;
      last = sig_.released;
    }
    if (last) Delete();
  }

 private:
  // With sig_.mu held: whether to start the next read (none in flight, the stream not ended,
  // fewer than kReadAhead messages waiting); true marks it in flight.
  bool ClaimRead() {
    if (sig_.reading || sig_.read_end || sig_.inbox.size() >= kReadAhead) return false;
    sig_.reading = true;
    return true;
  }
  // With sig_.mu held: whether the caller is the one to Finish (the handler has returned and
  // every queued write is out); true marks it claimed.
  bool ClaimFinish() {
    if (!sig_.handler_done || !sig_.outbox.empty() || sig_.finishing) return false;
    sig_.finishing = true;
    return true;
  }
  // Starts the claimed read with the lock released, and takes the lock back.
  void StartReadUnlocked(std::unique_lock<std::mutex>* lock) {
    lock->unlock();
    this->StartRead(&incoming_);
    lock->lock();
  }

  void Run(const RawHandler& handler) {
    grpc::Status status;
    try {
      status = handler(ctx_, this);
    } catch (...) {
      status = ToStatus(std::current_exception());
    }
    bool finish;
    {
      // Finish follows the queued writes (and no read is started after this).
      std::lock_guard<std::mutex> lock(sig_.mu);
      sig_.read_end = true;
      sig_.status = std::move(status);
      sig_.handler_done = true;
      finish = ClaimFinish();
    }
    if (finish) this->Finish(sig_.status);
    bool last;
    {
      std::lock_guard<std::mutex> lock(sig_.mu);
      sig_.released = true;
      last = sig_.call_done;  // else OnDone, still to come, deletes
    }
    if (last) Delete();
  }

  void Delete() {
    delete this;
    --running_calls;
  }

  grpc::CallbackServerContext* const ctx_;
  const grpc::ByteBuffer* request_;  // server streaming: the request, until read
  grpc::ByteBuffer* reply_;          // client streaming: where the reply goes, until written
  grpc::ByteBuffer incoming_;        // the read in flight writes here
  Signals sig_;
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
