#pragma once
// Test harness: a ServerRunner on 127.0.0.1:0 and PsClients as threads in this process.
#include <grpcpp/grpcpp.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/error.h"
#include "compressors/registry.h"
#include "proto/gradpress.grpc.pb.h"
#include "server/server_runner.h"
#include "tests/catch_torch.h"
#include "transport/chunks.h"
#include "worker/client/grpc_ps_client.h"

namespace gradpress::testing {

using compressors::TensorSpec;

inline std::vector<TensorSpec> Specs(const std::vector<std::vector<int64_t>>& shapes) {
  std::vector<TensorSpec> s;
  for (size_t i = 0; i < shapes.size(); ++i) s.push_back({"layer" + std::to_string(i), shapes[i]});
  return s;
}

inline std::vector<torch::Tensor> Zeros(const std::vector<TensorSpec>& specs) {
  std::vector<torch::Tensor> t;
  for (const auto& s : specs) t.push_back(torch::zeros(s.shape));
  return t;
}

// A store for n workers as the end-to-end tests run it: 2 threads, workers dropped after 30 s.
inline server::StoreOptions TestStoreOptions(int workers) {
  server::StoreOptions o;
  o.workers = workers;
  o.threads = 2;
  o.worker_timeout_s = 30;
  return o;
}

struct Cluster {
  explicit Cluster(server::StoreOptions opts, double deadline_s = 30)
      : runner(std::move(opts), deadline_s) {
    port = runner.Start("127.0.0.1:0");
  }
  ~Cluster() { runner.Stop(1.0); }

  worker::ClientOptions Client(int i, const std::string& push = "none") const {
    worker::ClientOptions o;
    o.server = "127.0.0.1:" + std::to_string(port);
    o.worker_id = "worker-" + std::to_string(i);
    o.push = ParseCodecShorthand(push);
    o.deadline_s = 30;
    o.max_retries = 2;
    o.backoff_initial_s = 0.01;
    return o;
  }

  // Runs fn(i) on n threads and joins them; rethrows the first failure.
  static void Parallel(int n, const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    std::vector<std::exception_ptr> errors(n);
    for (int i = 0; i < n; ++i) {
      threads.emplace_back([&, i] {
        try {
          fn(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (auto& e : errors)
      if (e) std::rethrow_exception(e);
  }

  // Sends hand-made payloads through a raw PushPull stream (bypassing the client's checks).
  grpc::Status RawPushPull(const std::string& worker, uint64_t incarnation, int64_t step,
                           const std::vector<compressors::KeyPayload>& payloads) const {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    auto stub = proto::ParameterServer::NewStub(channel);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto stream = stub->PushPull(&ctx);
    proto::PushMessage m;
    m.mutable_header()->set_worker_id(worker);
    m.mutable_header()->set_incarnation(incarnation);
    m.mutable_header()->set_step(step);
    stream->Write(m);
    for (const auto& kp : payloads) {  // one chunk per key: the generated types throughout
      proto::PushMessage cm;
      proto::TensorChunk* c = cm.add_chunk();
      c->set_key(kp.key);
      c->set_codec(kp.payload.codec);
      for (int64_t d : kp.payload.shape) c->add_shape(d);
      c->set_dtype(static_cast<uint32_t>(kp.payload.dtype));
      c->set_total_bytes(kp.payload.bytes.size());
      c->set_data(kp.payload.bytes);
      stream->Write(cm);
    }
    stream->WritesDone();
    proto::PullMessage reply;
    while (stream->Read(&reply)) {
    }
    return stream->Finish();
  }

  server::ServerRunner runner;
  int port = 0;
};

// A "none" payload of a tensor.
inline compressors::KeyPayload NonePayload(const std::string& key, const torch::Tensor& t) {
  compressors::RegisterBuiltinCompressors();
  auto none = compressors::MakeCompressor(CodecSpec{});
  return {key, none->Encode(t)};
}

// A ParameterStore in this process: `workers` workers ("worker-0", ...) registered on `model`,
// zero initial weights from worker-0, two pool threads, no periodic stats.
struct InProcessStore {
  InProcessStore(int workers, const std::vector<TensorSpec>& model)
      : InProcessStore(model, Options(workers)) {}
  // With other options (a pull codec, ...): o.workers workers.
  InProcessStore(const std::vector<TensorSpec>& model, const server::StoreOptions& o) : store(o) {
    std::vector<compressors::KeyPayload> zeros;
    for (int w = 0; w < o.workers; ++w) store.Register({WorkerName(w), 1}, model, "job");
    for (const TensorSpec& s : model) zeros.push_back(NonePayload(s.key, torch::zeros(s.shape)));
    store.InitWeights({WorkerName(0), 1}, zeros);
  }
  static std::string WorkerName(int w) { return "worker-" + std::to_string(w); }
  static server::StoreOptions Options(int workers) {
    server::StoreOptions o;
    o.workers = workers;
    o.threads = 2;
    o.stats_every = 0;
    return o;
  }
  server::ParameterStore store;
};

}  // namespace gradpress::testing
