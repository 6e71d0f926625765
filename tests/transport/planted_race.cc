// gp_tsan_planted: a check of the checker (scripts/tsan.sh). Two deliberate data races in
// project-style code reached from gRPC's reactions, which ThreadSanitizer must report under
// scripts/tsan.supp: a suppression that matched them (a module on a gRPC thread's creation
// stack, a frame every reaction has) would hide the project's own races too.
// - PlantedHandlerRace: a raw call's handler (transport::ServeBidi: launched by the first read's
//   reaction, run on the service's handler threads) adds each request's size to a plain counter
//   shared by every call, without a lock; two calls run at once.
// - PlantedReactionRace: a reactor of its own counts its reads in OnReadDone (on whichever
//   thread gRPC runs the reaction: one of its own, or a client thread polling its completion
//   queue) into a plain counter that a watcher thread reads meanwhile, without a lock.
// Exit status 0 when both calls succeeded: the races are for TSan to report, and tsan.sh fails
// unless a report names each function. Not a ctest: without TSan it shows nothing.
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <thread>

#include "common/task_threads.h"
#include "transport/grpc_process.h"
#include "transport/raw_client.h"
#include "transport/raw_server.h"

namespace gradpress::planted {
namespace {

int64_t handler_bytes = 0;  // the handlers' shared counter: no lock (the planted race)
int reaction_reads = 0;     // the reactor's counter: no lock (the planted race)
std::atomic<int> arrived{0};
std::atomic<bool> watching{true};

__attribute__((noinline)) void PlantedHandlerRace(int64_t n) { handler_bytes += n; }
__attribute__((noinline)) void PlantedReactionRace() { ++reaction_reads; }
__attribute__((noinline)) int PlantedReactionRaceWatcher() { return reaction_reads; }

// Both handlers run at once: each waits, on a relaxed atomic (no happens-before for TSan),
// until the other has arrived, then both write the counter.
grpc::Status RacyHandler(grpc::CallbackServerContext*, transport::RawStream* s) {
  grpc::ByteBuffer msg;
  if (!s->Read(&msg)) return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request");
  arrived.fetch_add(1, std::memory_order_relaxed);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (arrived.load(std::memory_order_relaxed) < 2 && std::chrono::steady_clock::now() < until)
    std::this_thread::yield();
  PlantedHandlerRace(static_cast<int64_t>(msg.Length()));
  s->Write(msg);
  return grpc::Status::OK;
}

class CountingReactor final : public grpc::ServerGenericBidiReactor {
 public:
  CountingReactor() { StartRead(&in_); }
  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);
      return;
    }
    PlantedReactionRace();
    StartRead(&in_);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer in_;
};

class Service final : public grpc::CallbackGenericService {
 public:
  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override {
    if (ctx->method() == "/planted.Planted/Handler")
      return transport::ServeBidi(ctx, &threads_, RacyHandler);
    return new CountingReactor();
  }
  TaskThreads threads_{transport::kMaxRawCalls};
};

grpc::ByteBuffer Message(const std::string& s) {
  grpc::Slice slice(s);
  return grpc::ByteBuffer(&slice, 1);
}

bool Call(grpc::GenericStub* stub, const std::string& path, int messages) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  transport::RawCall call(stub, path, &ctx);
  for (int i = 0; i < messages; ++i) call.Write(Message("planted " + std::to_string(i)));
  call.WritesDone();
  grpc::ByteBuffer reply;
  while (call.Read(&reply)) {
  }
  const grpc::Status st = call.Finish();
  if (!st.ok()) std::fprintf(stderr, "%s: %s\n", path.c_str(), st.error_message().c_str());
  return st.ok();
}

int Main() {
  transport::ConfigureGrpcProcess();
  Service service;
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterCallbackGenericService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || port == 0) return 1;
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  bool theirs = false;
  std::thread other([&] { theirs = Call(&stub, "/planted.Planted/Handler", 1); });
  const bool mine = Call(&stub, "/planted.Planted/Handler", 1);
  other.join();
  // The watcher reads the reactor's counter while the call runs (relaxed flag: no
  // happens-before for TSan between it and the reaction).
  int seen = 0;
  std::thread watcher([&] {
    while (watching.load(std::memory_order_relaxed)) {
      seen = PlantedReactionRaceWatcher();
      std::this_thread::yield();
    }
    seen = PlantedReactionRaceWatcher();
  });
  const bool ok = theirs && mine && Call(&stub, "/planted.Planted/Reaction", 3);
  watching.store(false, std::memory_order_relaxed);
  watcher.join();
  const int reads = seen;
  server->Shutdown();
  service.threads_.Join();
  std::printf("gp_tsan_planted: calls %s, %d reads counted, %lld bytes\n", ok ? "ok" : "FAILED",
              reads, static_cast<long long>(handler_bytes));
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace gradpress::planted

int main() { return gradpress::planted::Main(); }
