// A VGG11 and a ResNet-18 training step on synthetic CIFAR-shaped data go through the whole
// server path: register the model's fingerprint, initial weights, a compressed push of every
// parameter's gradient, and the averaged gradient applied on two workers.
#include "server/server_options.h"
#include "tests/server/cluster.h"
#include "worker/models/model_factory.h"

namespace gradpress::testing {
namespace {

void OneStep(const std::string& model_name) {
  INFO(model_name);
  server::StoreOptions opts;
  opts.workers = 2;
  opts.pull = ParseCodecShorthand("topk ratio=0.01");
  opts.pull.then = std::make_shared<CodecSpec>(ParseCodecShorthand("qsgd levels=16"));
  Cluster c(opts);
  std::vector<std::vector<torch::Tensor>> after(2);
  std::vector<worker::StepMetrics> st(2);
  std::vector<uint64_t> dense(2);    // the model's float32 bytes
  Cluster::Parallel(2, [&](int w) {  // records; the main thread asserts
    torch::manual_seed(w);           // different initial weights: the server's must win
    auto net = worker::models::MakeModel(model_name, 3, 32, 10);
    std::vector<TensorSpec> specs;
    std::vector<torch::Tensor> params;
    for (const auto& p : net->named_parameters()) {
      specs.push_back({p.key(), p.value().sizes().vec()});
      params.push_back(p.value());
    }
    auto o = c.Client(w, "topk ratio=0.01");
    o.push.then = std::make_shared<CodecSpec>(ParseCodecShorthand("qsgd levels=16"));
    o.push.error_feedback = true;
    worker::GrpcPsClient client(o);
    client.Register(specs);
    {
      torch::NoGradGuard no_grad;
      client.InitOrPull(&params);
    }
    auto gen = at::detail::createCPUGenerator(100 + w);
    torch::Tensor images = torch::randn({4, 3, 32, 32}, gen);
    torch::Tensor labels = torch::randint(0, 10, {4}, gen);
    net->train();
    torch::Tensor loss = torch::nll_loss(torch::log_softmax(net->forward(images), 1), labels);
    loss.backward();
    std::vector<torch::Tensor> grads, received;
    for (auto& p : params) {
      grads.push_back(p.grad());
      received.push_back(torch::empty_like(p));
    }
    st[w] = client.PushPull(0, grads, &received);
    for (const auto& p : params) dense[w] += 4 * static_cast<uint64_t>(p.numel());
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < params.size(); ++i) params[i].sub_(0.1 * received[i]);
    for (auto& p : params) after[w].push_back(p.detach().clone());
  });
  for (int w = 0; w < 2; ++w) {
    INFO("worker " << w);
    CHECK(st[w].contributors == 2);
    CHECK(dense[w] > 0);
    CHECK(st[w].bytes_up * 20 < dense[w]);  // compressed both ways
    CHECK(st[w].bytes_down * 20 < dense[w]);
  }
  REQUIRE(after[0].size() == after[1].size());
  for (size_t i = 0; i < after[0].size(); ++i) CHECK(torch::equal(after[0][i], after[1][i]));
}

TEST_CASE("a VGG11 step goes through the server path", "[trainer]") { OneStep("vgg11"); }
TEST_CASE("a ResNet-18 step goes through the server path", "[trainer]") { OneStep("resnet18"); }

}  // namespace
}  // namespace gradpress::testing
