// Every validation case: a clear status naming the key and the reason, and the store left
// unchanged (the next valid step still averages exactly).
#include <grpcpp/generic/generic_stub.h>

#include <future>
#include <map>

#include "tests/server/cluster.h"
#include "transport/status.h"

namespace gradpress::testing {
namespace {

const std::vector<TensorSpec> kSpecs = Specs({{64, 32}, {10}});

struct OneWorker {
  explicit OneWorker(server::StoreOptions o = {}) : c(Setup(o)), client(c.Client(0)) {
    client.Register(kSpecs);
    auto params = Zeros(kSpecs);
    client.InitOrPull(&params);
  }
  static server::StoreOptions Setup(server::StoreOptions o) {
    o.workers = 1;
    return o;
  }
  // After a rejected push the next valid push must average exactly as if nothing happened.
  void ExpectUnchanged(int64_t step) {
    std::vector<torch::Tensor> g = {torch::full({64, 32}, 2.f), torch::full({10}, -1.f)};
    auto out = Zeros(kSpecs);
    auto st = client.PushPull(step, g, &out);
    CHECK(st.contributors == 1);
    CHECK(torch::equal(out[0], g[0]));
    CHECK(torch::equal(out[1], g[1]));
  }
  Cluster c;
  worker::GrpcPsClient client;
};

std::vector<compressors::KeyPayload> Good() {
  return {NonePayload("layer0", torch::ones({64, 32})), NonePayload("layer1", torch::ones({10}))};
}

TEST_CASE("unknown worker: NOT_FOUND naming the worker", "[validation]") {
  OneWorker w;
  const auto s = w.c.RawPushPull("stranger", 1, 0, Good());
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK_THAT(s.error_message(), Catch::Contains("worker 'stranger' is not registered"));
  w.ExpectUnchanged(0);
}

TEST_CASE("model fingerprint mismatch: FAILED_PRECONDITION naming the first key", "[validation]") {
  server::StoreOptions o;
  o.workers = 2;
  Cluster c(o);
  worker::GrpcPsClient a(c.Client(0)), b(c.Client(1));
  a.Register(kSpecs);
  auto other = kSpecs;
  other[1].shape = {11};
  CHECK_THROWS_WITH(b.Register(other), Catch::Contains("fingerprint differs at key 'layer1'") &&
                                           Catch::Contains("[11]") && Catch::Contains("[10]"));
  other = kSpecs;
  other[0].key = "conv";
  CHECK_THROWS_AS(b.Register(other), FailedPrecondition);
  CHECK_NOTHROW(b.Register(kSpecs));
}

TEST_CASE("wrong key or shape: INVALID_ARGUMENT naming the key", "[validation]") {
  OneWorker w;
  auto bad = Good();
  bad[1].key = "layer9";
  auto s = w.c.RawPushPull("worker-0", 1, 0, bad);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(s.error_message(), Catch::Contains("unknown key 'layer9'"));
  bad = Good();
  bad[0] = NonePayload("layer0", torch::ones({32, 64}));
  s = w.c.RawPushPull("worker-0", 1, 0, bad);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(s.error_message(), Catch::Contains("key 'layer0': shape [32, 64]"));
  bad = Good();
  bad.pop_back();
  s = w.c.RawPushPull("worker-0", 1, 0, bad);
  CHECK_THAT(s.error_message(), Catch::Contains("missing key 'layer1'"));
  w.ExpectUnchanged(0);
}

TEST_CASE("payload that fails to decode: INVALID_ARGUMENT naming the key", "[validation]") {
  OneWorker w;
  auto bad = Good();
  bad[0].payload.codec = "qsgd";  // fp32 bytes are not a qsgd payload
  auto s = w.c.RawPushPull("worker-0", 1, 0, bad);
  CHECK(s.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(s.error_message(), Catch::Contains("key 'layer0': payload does not decode"));
  bad = Good();
  bad[1].payload.bytes.pop_back();
  s = w.c.RawPushPull("worker-0", 1, 0, bad);
  CHECK_THAT(s.error_message(), Catch::Contains("key 'layer1'"));
  bad = Good();
  bad[1].payload.codec = "zstd";
  s = w.c.RawPushPull("worker-0", 1, 0, bad);
  CHECK_THAT(s.error_message(), Catch::Contains("unknown codec 'zstd'"));
  w.ExpectUnchanged(0);
}

TEST_CASE("NaN or Inf in a decoded gradient: INVALID_ARGUMENT naming the key", "[validation]") {
  OneWorker w;
  auto out = Zeros(kSpecs);
  torch::Tensor g = torch::ones({10});
  g[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH(w.client.PushPull(0, {torch::ones({64, 32}), g}, &out),
                    Catch::Contains("key 'layer1'") && Catch::Contains("NaN or Inf at element 3"));
  g[3] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(w.client.PushPull(0, {torch::ones({64, 32}), g}, &out),
                  gradpress::InvalidArgument);
  w.ExpectUnchanged(0);
}

TEST_CASE("duplicate (worker, incarnation, step): acknowledged, applied once", "[validation]") {
  OneWorker w;
  w.ExpectUnchanged(0);
  auto out = Zeros(kSpecs);
  // The same step again with other values: the server answers with step 0's result.
  auto st = w.client.PushPull(0, {torch::full({64, 32}, 9.f), torch::full({10}, 9.f)}, &out);
  CHECK(st.duplicate == false);  // the client cannot tell; the result shows it
  CHECK(out[0].eq(2.f).all().item<bool>());
  CHECK(w.c.runner.store().step() == 1);
  w.ExpectUnchanged(1);
}

TEST_CASE("push from an older incarnation: rejected", "[validation]") {
  OneWorker w;
  auto newer = w.c.Client(0);
  newer.incarnation = 2;
  worker::GrpcPsClient restarted(newer);
  restarted.Register(kSpecs);
  auto out = Zeros(kSpecs);
  CHECK_THROWS_WITH(w.client.PushPull(0, {torch::ones({64, 32}), torch::ones({10})}, &out),
                    Catch::Contains("incarnation 1 is older than the registered 2"));
  std::vector<torch::Tensor> g = {torch::full({64, 32}, 2.f), torch::full({10}, -1.f)};
  restarted.PushPull(0, g, &out);
  CHECK(torch::equal(out[0], g[0]));
}

TEST_CASE("rejections are counted by reason", "[validation]") {
  OneWorker w;
  w.c.RawPushPull("stranger", 1, 0, Good());
  auto bad = Good();
  bad[0].payload.codec = "qsgd";
  w.c.RawPushPull("worker-0", 1, 0, bad);
  const auto stats = w.c.runner.store().Stats();
  CHECK(stats.rejected.at("unknown_worker") == 1);
  CHECK(stats.rejected.at("undecodable") == 1);
  CHECK_THAT(w.client.StatsText(),
             Catch::Contains("gradpress_rejected_total{reason=\"undecodable\"} 1"));
}

TEST_CASE("the standard gRPC health service answers SERVING", "[validation]") {
  OneWorker w;
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(w.c.port),
                                     grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  grpc::Slice empty(std::string{});  // HealthCheckRequest{service: ""} serialises to 0 bytes
  grpc::ByteBuffer request(&empty, 1), response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) { done.set_value(s); });
  REQUIRE(done.get_future().get().ok());
  std::vector<grpc::Slice> slices;
  REQUIRE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  CHECK(bytes == std::string("\x08\x01", 2));  // field 1 (status) = SERVING
}

}  // namespace
}  // namespace gradpress::testing

namespace gradpress::testing {
namespace {

TEST_CASE("a model larger than server.max_model_mb is refused before any allocation",
          "[validation]") {
  server::StoreOptions o;
  o.workers = 1;
  o.max_model_bytes = 1 << 20;
  server::ParameterStore store(o);
  CHECK_THROWS_WITH(store.Register({"worker-0", 1}, Specs({{512, 1024}}), ""),
                    Catch::Contains("2 MB") && Catch::Contains("server.max_model_mb"));
  // 2^60 floats: refused by the limit, never handed to the allocator.
  CHECK_THROWS_WITH(store.Register({"worker-0", 1}, Specs({{1 << 30, 1 << 30}}), ""),
                    Catch::Contains("server.max_model_mb"));
  CHECK(store.model().empty());
  CHECK(store.Register({"worker-0", 1}, Specs({{256, 1024}}), "").rank == 0);  // exactly 1 MB
}

}  // namespace
}  // namespace gradpress::testing

namespace gradpress::testing {
namespace {

// The server's tensor methods are raw callback methods; a client generated from the .proto
// (typed messages, the protobuf library's own encoding) must still drive every one of them.
struct TypedReply {
  proto::PullHeader header;
  std::map<std::string, std::string> data;  // key -> payload bytes, chunks joined
};
template <typename Reader>
TypedReply ReadTyped(Reader* reader) {
  TypedReply r;
  proto::PullMessage m;
  while (reader->Read(&m)) {
    if (m.has_header()) r.header = m.header();
    for (const proto::TensorChunk& c : m.chunk()) r.data[c.key()] += c.data();
  }
  return r;
}

std::string Floats(const torch::Tensor& t) {
  return std::string(static_cast<const char*>(t.data_ptr()), t.numel() * sizeof(float));
}

proto::PushMessage Header(int64_t step) {
  proto::PushMessage m;
  m.mutable_header()->set_worker_id("worker-0");
  m.mutable_header()->set_incarnation(1);
  m.mutable_header()->set_step(step);
  return m;
}

// Every key's chunk in one message, as a generated client may send them.
template <typename Writer>
void WriteTyped(Writer* w, const std::vector<compressors::KeyPayload>& payloads) {
  proto::PushMessage m;
  for (const auto& kp : payloads) {
    proto::TensorChunk* c = m.add_chunk();
    c->set_key(kp.key);
    c->set_codec(kp.payload.codec);
    for (int64_t d : kp.payload.shape) c->add_shape(d);
    c->set_total_bytes(kp.payload.bytes.size());
    c->set_data(kp.payload.bytes);
  }
  w->Write(m);
}

std::unique_ptr<grpc::ClientContext> Ctx() {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  return ctx;
}

TEST_CASE("a client generated from the .proto drives every tensor method", "[validation][wire]") {
  server::StoreOptions o;
  o.workers = 1;
  Cluster c(o);
  auto stub = proto::ParameterServer::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(c.port), grpc::InsecureChannelCredentials()));
  proto::RegisterRequest reg;
  reg.set_worker_id("worker-0");
  reg.set_incarnation(1);
  for (const auto& s : kSpecs) transport::ToProto(s, reg.add_model());
  proto::RegisterReply rr;
  REQUIRE(stub->Register(Ctx().get(), reg, &rr).ok());

  const torch::Tensor w0 = torch::arange(64 * 32, torch::kFloat32).reshape({64, 32});
  const torch::Tensor w1 = torch::full({10}, 0.5f);
  proto::InitReply init;
  {
    auto ctx = Ctx();
    auto writer = stub->InitWeights(ctx.get(), &init);
    writer->Write(Header(0));
    WriteTyped(writer.get(), {NonePayload("layer0", w0), NonePayload("layer1", w1)});
    writer->WritesDone();
    REQUIRE(writer->Finish().ok());
  }
  CHECK(init.accepted());

  proto::PullRequest pull;
  pull.set_worker_id("worker-0");
  pull.set_incarnation(1);
  {
    auto ctx = Ctx();
    auto reader = stub->PullWeights(ctx.get(), pull);
    const TypedReply got = ReadTyped(reader.get());
    REQUIRE(reader->Finish().ok());
    CHECK(got.data.at("layer0") == Floats(w0));
    CHECK(got.data.at("layer1") == Floats(w1));
  }

  // PushPull (method 3: gradients back), then Pull of that step and a Push of the next.
  const grpc::Status s = c.RawPushPull("worker-0", 1, 0, Good());
  REQUIRE(s.ok());
  pull.set_step(0);
  {
    auto ctx = Ctx();
    auto reader = stub->Pull(ctx.get(), pull);
    const TypedReply got = ReadTyped(reader.get());
    REQUIRE(reader->Finish().ok());
    CHECK(got.header.step() == 0);  // the result of step 0
    CHECK(got.header.contributors() == 1);
    CHECK(got.data.at("layer0") == Floats(torch::ones({64, 32})));
  }
  proto::PushReply pushed;
  {
    auto ctx = Ctx();
    auto writer = stub->Push(ctx.get(), &pushed);
    writer->Write(Header(1));
    WriteTyped(writer.get(), Good());
    writer->WritesDone();
    REQUIRE(writer->Finish().ok());
  }
  CHECK(pushed.step() == 2);
  CHECK_FALSE(pushed.duplicate());
  CHECK(c.runner.store().step() == 2);
}

TEST_CASE("a refusal names its reason in the status details, not the server's file:line",
          "[validation]") {
  OneWorker w;
  const grpc::Status s = w.c.RawPushPull("stranger", 1, 0, Good());
  CHECK(s.error_code() == grpc::StatusCode::NOT_FOUND);
  CHECK(transport::ReasonOf(s) == Reason::kNotRegistered);
  CHECK_THAT(s.error_message(), !Catch::Contains(".cc:"));
  auto bad = Good();
  bad[0].payload.codec = "qsgd";
  CHECK(transport::ReasonOf(w.c.RawPushPull("worker-0", 1, 0, bad)) == Reason::kUndecodable);
  // Through the worker's client: the Error it throws carries the reason.
  auto newer = w.c.Client(0);
  newer.incarnation = 2;
  worker::GrpcPsClient restarted(newer);
  restarted.Register(kSpecs);
  auto out = Zeros(kSpecs);
  Reason got = Reason::kUnspecified;
  try {
    w.client.PushPull(0, {torch::ones({64, 32}), torch::ones({10})}, &out);
  } catch (const FailedPrecondition& e) {
    got = e.reason();
  }
  CHECK(got == Reason::kSuperseded);
}

}  // namespace
}  // namespace gradpress::testing
