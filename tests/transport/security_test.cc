// TLS, mutual TLS and bearer tokens end to end: an in-process server and PsClients with
// certificates made by openssl (tests/transport/harness.h).
#include "transport/security.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <condition_variable>
#include <future>
#include <mutex>

#include "proto/gradpress.grpc.pb.h"
#include "server/parameter_service.h"
#include "tests/transport/harness.h"
#include "tests/transport/pki.h"
#include "tests/wait_for.h"

namespace gradpress::testing {
namespace {

// Register, InitOrPull and `steps` PushPull steps of n workers; checks the means.
void Train(SecureCluster& cluster, const std::vector<worker::ClientOptions>& clients,
           int steps = 3) {
  const auto specs = Specs({{8, 4}, {3}});
  const int n = static_cast<int>(clients.size());
  std::vector<std::vector<torch::Tensor>> got(n);
  SecureCluster::Parallel(n, [&](int w) {
    worker::GrpcPsClient client(clients[w]);
    client.Register(specs);
    auto params = Zeros(specs);
    client.InitOrPull(&params);
    for (int step = 0; step < steps; ++step) {
      std::vector<torch::Tensor> grads, out = Zeros(specs);
      for (const auto& s : specs) grads.push_back(torch::full(s.shape, float(w + step)));
      client.PushPull(step, grads, &out);
      got[w].insert(got[w].end(), out.begin(), out.end());
    }
  });
  for (int w = 0; w < n; ++w) {
    REQUIRE(got[w].size() == 2 * static_cast<size_t>(steps));
    for (int step = 0; step < steps; ++step) {
      const float mean = static_cast<float>(n - 1) / 2 + static_cast<float>(step);
      for (int k = 0; k < 2; ++k) {
        const torch::Tensor& t = got[w][2 * step + k];
        CHECK(torch::allclose(t, torch::full_like(t, mean)));
      }
    }
  }
}

// A server with the given security whose Register and Heartbeat are the real service's
// (token gate and store), seen through a wrapper that counts the heartbeats answered OK:
// what a heartbeat that reached the store through the gate looks like from outside.
class HeartbeatServer final : public proto::ParameterServer::Service {
 public:
  HeartbeatServer(const SecurityConfig& security, server::StoreOptions options)
      : security_(transport::LoadServerSecurity(security)),
        store_(std::move(options)),
        inner_(&store_, /*deadline_s=*/30, server::ServiceGate{security_.token, {}}) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", security_.credentials, &port_);
    builder.RegisterService(this);
    server_ = builder.BuildAndStart();
    GP_ENFORCE(server_ != nullptr && port_ != 0, "cannot start the heartbeat server");
  }
  ~HeartbeatServer() override { server_->Shutdown(); }

  grpc::Status Register(grpc::ServerContext* ctx, const proto::RegisterRequest* req,
                        proto::RegisterReply* reply) override {
    return inner_.Register(ctx, req, reply);
  }
  grpc::Status Heartbeat(grpc::ServerContext* ctx, const proto::HeartbeatRequest* req,
                         proto::HeartbeatReply* reply) override {
    const grpc::Status s = inner_.Heartbeat(ctx, req, reply);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (s.ok()) {
        ++ok_;
        last_ = *reply;
      } else {
        ++refused_;
      }
    }
    cv_.notify_all();
    return s;
  }
  // Waits (kWaitTimeout at most) until n heartbeats were answered OK.
  bool WaitHeartbeats(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, kWaitTimeout, [&] { return ok_ >= n; });
  }
  int refused() {
    std::lock_guard<std::mutex> lock(mu_);
    return refused_;
  }
  proto::HeartbeatReply last() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }
  int port() const { return port_; }
  server::ParameterStore& store() { return store_; }

 private:
  const transport::ServerSecurity security_;
  server::ParameterStore store_;
  server::ParameterService inner_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::mutex mu_;
  std::condition_variable cv_;
  int ok_ = 0, refused_ = 0;
  proto::HeartbeatReply last_;
};

TEST_CASE("TLS with a bearer token works end to end", "[security]") {
  Secure sec;
  SecureCluster cluster(TestStoreOptions(2), sec.Server());
  std::vector<worker::ClientOptions> clients = {cluster.Client(0, sec.Client()),
                                                cluster.Client(1, sec.Client())};
  clients[1].server = "localhost:" + std::to_string(cluster.port);  // the DNS name, too
  Train(cluster, clients);
  CHECK(cluster.runner.store().Stats().rejected.count("unauthenticated") == 0);
  // The background heartbeats carry the token too: they reach the store through the gate.
  HeartbeatServer hb(sec.Server(), TestStoreOptions(1));
  {
    worker::ClientOptions o = cluster.Client(0, sec.Client());
    o.server = "127.0.0.1:" + std::to_string(hb.port());
    o.heartbeat_s = 0.01;
    worker::GrpcPsClient client(o);
    client.Register(Specs({{8, 4}, {3}}));  // the only call it makes: the rest are heartbeats
    CHECK(hb.WaitHeartbeats(3));
  }
  CHECK(hb.refused() == 0);
  CHECK(hb.last().server_step() == 0);
  CHECK(hb.last().live_workers() == 1);
  CHECK(hb.store().Stats().rejected.empty());
}

TEST_CASE("$GRADPRESS_TOKEN overrides security.token_file", "[security]") {
  Secure sec;
  SecureCluster cluster(TestStoreOptions(1), sec.Server());
  SecurityConfig c = sec.Client();
  c.token_file = sec.dir.File("other", "another-token");
  CHECK(ErrorOf([&] {
          worker::GrpcPsClient(cluster.Client(0, c)).Register(Specs({{2}}));
        }).find("bad bearer token") != std::string::npos);
  ScopedEnv env(transport::kTokenEnv, kToken);
  CHECK(transport::ResolveToken(c) == kToken);
  Train(cluster, {cluster.Client(0, c)}, 1);
}

TEST_CASE("calls without the token, or with a wrong one, are UNAUTHENTICATED", "[security]") {
  Secure sec;
  SecureCluster cluster(TestStoreOptions(1), sec.Server());
  const std::string none = ErrorOf(
      [&] { worker::GrpcPsClient(cluster.Client(0, sec.Client(false))).Register(Specs({{2}})); });
  INFO(none);
  CHECK(none.find("missing bearer token") != std::string::npos);
  CHECK(none.find("UNAUTHENTICATED") != std::string::npos);
  SecurityConfig wrong = sec.Client();
  wrong.token_file = sec.dir.File("wrong", std::string(kToken) + "x");
  const std::string bad =
      ErrorOf([&] { worker::GrpcPsClient(cluster.Client(0, wrong)).Register(Specs({{2}})); });
  INFO(bad);
  CHECK(bad.find("bad bearer token") != std::string::npos);
  CHECK(cluster.runner.store().Stats().rejected.at("unauthenticated") == 2);
}

// Every ParameterServer RPC, sent with the raw stub and no metadata, is refused; the health
// service answers SERVING without a token.
TEST_CASE("every RPC checks the token but the health service does not", "[security]") {
  Secure sec;
  SecureCluster cluster(TestStoreOptions(1), sec.Server());
  const transport::ClientSecurity cs = transport::LoadClientSecurity(sec.Client(false));
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(cluster.port), cs.credentials);
  auto stub = proto::ParameterServer::NewStub(channel);
  auto ctx = [] {
    auto c = std::make_unique<grpc::ClientContext>();
    c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    return c;
  };
  std::vector<std::pair<std::string, grpc::Status>> got;
  {
    proto::RegisterReply r;
    got.push_back({"Register", stub->Register(ctx().get(), {}, &r)});
  }
  {
    proto::HeartbeatReply r;
    got.push_back({"Heartbeat", stub->Heartbeat(ctx().get(), {}, &r)});
  }
  {
    proto::StatsReply r;
    got.push_back({"Stats", stub->Stats(ctx().get(), {}, &r)});
  }
  {
    proto::ElectReply r;
    got.push_back({"Elect", stub->Elect(ctx().get(), {}, &r)});
  }
  for (const char* name : {"InitWeights", "PublishWeights", "Push"}) {
    auto c = ctx();
    proto::InitReply r;
    proto::PushReply pr;
    std::unique_ptr<grpc::ClientWriter<proto::PushMessage>> w =
        std::string(name) == "InitWeights"      ? stub->InitWeights(c.get(), &r)
        : std::string(name) == "PublishWeights" ? stub->PublishWeights(c.get(), &r)
                                                : stub->Push(c.get(), &pr);
    w->WritesDone();
    got.push_back({name, w->Finish()});
  }
  for (const char* name : {"PullWeights", "Pull"}) {
    auto c = ctx();
    auto r = std::string(name) == "Pull" ? stub->Pull(c.get(), {}) : stub->PullWeights(c.get(), {});
    proto::PullMessage m;
    while (r->Read(&m)) {
    }
    got.push_back({name, r->Finish()});
  }
  {
    auto c = ctx();
    auto s = stub->PushPull(c.get());
    s->WritesDone();
    proto::PullMessage m;
    while (s->Read(&m)) {
    }
    got.push_back({"PushPull", s->Finish()});
  }
  REQUIRE(got.size() == 10);
  for (const auto& [name, status] : got) {
    INFO(name << ": " << status.error_message());
    CHECK(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
    CHECK(status.error_message() == "missing bearer token");
  }
  CHECK(cluster.runner.store().Stats().rejected.at("unauthenticated") == 10);

  // grpc.health.v1.Health/Check with an empty request: SERVING (field 1 = 1), no token.
  grpc::ClientContext hc;
  hc.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::ByteBuffer request, response;
  grpc::Slice empty;
  request = grpc::ByteBuffer(&empty, 1);
  grpc::GenericStub health(channel);
  std::promise<grpc::Status> answered;
  health.UnaryCall(&hc, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                   [&](grpc::Status s) { answered.set_value(s); });
  const grpc::Status hs = answered.get_future().get();
  INFO(hs.error_message());
  REQUIRE(hs.ok());
  std::vector<grpc::Slice> slices;
  REQUIRE(response.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  CHECK(bytes == std::string("\x08\x01", 2));
}

TEST_CASE("a worker that trusts the wrong CA fails with a clear TLS error", "[security]") {
  Secure sec;
  SecureCluster cluster(TestStoreOptions(1), sec.Server());
  SecurityConfig c = sec.Client();
  c.ca = Pki::Get().wrong_ca;
  worker::ClientOptions o = cluster.Client(0, c);
  o.max_retries = 1;
  const std::string msg = ErrorOf([&] { worker::GrpcPsClient(o).Register(Specs({{2}})); });
  INFO(msg);
  CHECK(msg.find("Register to 127.0.0.1:") != std::string::npos);
  CHECK(msg.find("failed after 2 attempts") != std::string::npos);
  CHECK(msg.find("TLS is on") != std::string::npos);
  CHECK((msg.find("andshake") != std::string::npos || msg.find("SSL") != std::string::npos ||
         msg.find("ssl") != std::string::npos));
  // A name the certificate does not hold fails the same way; the override fixes it.
  SecurityConfig named = sec.Client();
  named.server_name = "not-the-server";
  o = cluster.Client(0, named);
  o.max_retries = 0;
  CHECK(ErrorOf([&] {
          worker::GrpcPsClient(o).Register(Specs({{2}}));
        }).find("failed after 1 attempt") != std::string::npos);
  named.server_name = "localhost";
  Train(cluster, {cluster.Client(0, named)}, 1);
}

TEST_CASE("mutual TLS refuses clients without a certificate of its CA", "[security]") {
  Secure sec;
  const Pki& pki = Pki::Get();
  SecureCluster cluster(TestStoreOptions(1), sec.Server(/*mutual=*/true));
  SecurityConfig none = sec.Client();
  worker::ClientOptions o = cluster.Client(0, none);
  o.max_retries = 1;
  std::string msg = ErrorOf([&] { worker::GrpcPsClient(o).Register(Specs({{2}})); });
  INFO(msg);
  CHECK(msg.find("failed after 2 attempts") != std::string::npos);
  SecurityConfig wrong = sec.Client();
  wrong.client_cert = pki.wrong_client_cert;
  wrong.client_key = pki.wrong_client_key;
  o = cluster.Client(0, wrong);
  o.max_retries = 1;
  msg = ErrorOf([&] { worker::GrpcPsClient(o).Register(Specs({{2}})); });
  INFO(msg);
  CHECK(msg.find("failed after 2 attempts") != std::string::npos);
  SecurityConfig good = sec.Client();
  good.client_cert = pki.client_cert;
  good.client_key = pki.client_key;
  Train(cluster, {cluster.Client(0, good)}, 2);
}

TEST_CASE("a token without TLS is refused unless allow_plaintext_token", "[security]") {
  Secure sec;
  SecurityConfig plain;
  plain.token_file = sec.token_file;
  const std::string msg = ErrorOf([&] { SecureCluster cluster(TestStoreOptions(1), plain); });
  INFO(msg);
  CHECK(msg.find("security.tls is false") != std::string::npos);
  CHECK(msg.find("allow_plaintext_token") != std::string::npos);
  {  // the same from $GRADPRESS_TOKEN alone
    ScopedEnv env(transport::kTokenEnv, "abc");
    CHECK(ErrorOf([&] {
            SecureCluster cluster(TestStoreOptions(1), SecurityConfig{});
          }).find("allow_plaintext_token") != std::string::npos);
  }
  plain.allow_plaintext_token = true;
  SecureCluster cluster(TestStoreOptions(1), plain);
  SecurityConfig client;
  client.token_file = sec.token_file;
  CHECK(ErrorOf([&] {
          worker::GrpcPsClient p(cluster.Client(0, client));
        }).find("allow_plaintext_token") != std::string::npos);
  client.allow_plaintext_token = true;
  Train(cluster, {cluster.Client(0, client)}, 2);
  CHECK(ErrorOf([&] {
          worker::GrpcPsClient(cluster.Client(0)).Register(Specs({{2}}));
        }).find("missing bearer token") != std::string::npos);
}

}  // namespace
}  // namespace gradpress::testing
