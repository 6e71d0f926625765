#include "transport/raw_server.h"

#include <grpcpp/server_context.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <type_traits>

#include "common/error.h"
#include "transport/status.h"

// ThreadSanitizer annotations (no-ops in other builds): gRPC hands a reactor from the thread
// that created it to the threads that run its reactions through its own synchronisation
// (absl::Mutex, completion queues), which TSan cannot see in Debian's uninstrumented gRPC.
// The constructor releases the reactor's address, every reaction acquires it: the edge gRPC
// makes, and no other.
#if defined(__SANITIZE_THREAD__)
#define GP_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GP_TSAN 1
#endif
#endif
#ifdef GP_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#define GP_TSAN_ACQUIRE(p) __tsan_acquire(p)
#define GP_TSAN_RELEASE(p) __tsan_release(p)
#else
#define GP_TSAN_ACQUIRE(p) static_cast<void>(p)
#define GP_TSAN_RELEASE(p) static_cast<void>(p)
#endif

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
  bool launched = false;  // the first read's reaction has launched the handler
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
  // Runs on gRPC's thread before gRPC binds the reactor to the call. The handler's thread
  // must not start an operation before that bind: gRPC keeps such an operation in the
  // reactor's pre-bind backlog, handed to the binding thread under its own absl::Mutex, which
  // ThreadSanitizer cannot see. So the first operation starts here, on the binding thread (a
  // read, or for a reply-only call the initial metadata), and the handler's task is launched
  // by that operation's reaction, which gRPC runs only once the call is bound.
  Blocking(grpc::CallbackServerContext* ctx, TaskThreads* threads, RawHandler handler,
           const grpc::ByteBuffer* request, grpc::ByteBuffer* reply)
      : ctx_(ctx),
        request_(request),
        reply_(reply),
        threads_(threads),
        handler_(std::move(handler)) {
    ++running_calls;
    if constexpr (kReads) {
      sig_.reading = true;    // no reaction before the StartRead below
      GP_TSAN_RELEASE(this);  // what the constructor wrote, for the reactions (see the top)
      this->StartRead(&incoming_);
    } else {
      GP_TSAN_RELEASE(this);
      this->StartSendInitialMetadata();
    }
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
    GP_TSAN_ACQUIRE(this);
    std::unique_lock<std::mutex> lock(sig_.mu);
    sig_.reading = false;
    if (ok) {
      sig_.inbox.push_back(std::move(incoming_));
      incoming_.Clear();
    } else {
      sig_.read_end = true;  // half-closed, or the call died
    }
    const bool launch = !sig_.launched;
    sig_.launched = true;
    // Before the launch no read is started: the call may yet be refused as busy.
    const bool more = !launch && ClaimRead();
    sig_.cv.notify_all();
    if (more) StartReadUnlocked(&lock);
    if (launch) {
      lock.unlock();
      Launch();
    }
  }
  void OnSendInitialMetadataDone(bool /*ok*/) override {
    GP_TSAN_ACQUIRE(this);
    if constexpr (!kReads) Launch();  // a failed send: the handler's writes see the call dead
  }
  void OnWriteDone(bool ok) {
    GP_TSAN_ACQUIRE(this);
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
    GP_TSAN_ACQUIRE(this);
    if (!threaded_.load()) {
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

  // From the first reaction (the call is bound): the handler on a pool thread, or UNAVAILABLE
  // when every thread is busy.
  void Launch() {
    threaded_ = true;  // before the task: OnDone reads it
    if (threads_->Run([this] { Run(); })) return;
    threaded_ = false;
    --running_calls;
    this->Finish(ToStatus(std::make_exception_ptr(
        Unavailable("server busy: too many calls in flight; retry", Reason::kTimedOut))));
  }

  void Run() {
    grpc::Status status;
    try {
      status = handler_(ctx_, this);
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
  TaskThreads* const threads_;
  const RawHandler handler_;
  grpc::ByteBuffer incoming_;  // the read in flight writes here
  Signals sig_;
  // The handler runs on a pool thread (else the call was refused, and OnDone deletes alone).
  // Atomic: set by a reaction, read by OnDone on another of gRPC's threads.
  std::atomic<bool> threaded_{false};
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
