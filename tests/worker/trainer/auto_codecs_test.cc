// compress.auto (worker/engine/auto_codecs.h): the per-key choice on hand-made calibrations, the
// buckets a choice assembles, the per-key push codecs it installs, and its config rules.
#include "worker/engine/auto_codecs.h"

#include "common/config.h"
#include "common/error.h"
#include "tests/catch_torch.h"
#include "worker/client/key_codecs.h"

namespace gradpress::worker {
namespace {

// Two keys, methods none / fp16 / top-k: key 0 a big matrix ready last (the input layer,
// nothing left of backward to hide its encode), key 1 a big one ready early.
KeyCalibration TwoKeys(double topk_encode_ms) {
  KeyCalibration k;
  k.forward_ms = 10;
  k.backward_ms = 20;
  k.optimizer_ms = 1;
  k.names = {"in.weight", "out.weight"};
  k.ready_ms = {20, 2};
  k.split = {1, 1};
  const int64_t dense = 4'000'000;
  auto cost = [&](double enc, int64_t bytes) {
    KeyCost c;
    c.encode_ms = enc;
    c.decode_ms = 0.1;
    c.bytes_up = bytes;
    c.bytes_down = bytes;
    c.dense_bytes = dense;
    return c;
  };
  k.cost = {{cost(0.2, dense), cost(0.2, dense)},
            {cost(0.5, dense / 2), cost(0.5, dense / 2)},
            {cost(topk_encode_ms, dense / 100), cost(topk_encode_ms, dense / 100)}};
  return k;
}

Cluster Link(double gbps) {
  Cluster c;
  c.workers = 2;
  c.rate_gbps = gbps;
  c.star = false;
  return c;
}

double Step(const KeyCalibration& k, const std::vector<int>& choice, const Cluster& c) {
  return PredictStep(Assemble(k, choice, "x"), c).step_ms;
}

TEST_CASE("compress.auto compresses on a slow link and sends dense on a fast one", "[auto]") {
  const KeyCalibration k = TwoKeys(/*topk_encode_ms=*/5);
  // 0.1 Gbit/s: 4 MB dense is 320 ms a key, top-k's 40 KB 3.2 ms: both keys compress.
  CHECK(ChooseMethods(k, Link(0.1)) == std::vector<int>{2, 2});
  // 1000 Gbit/s: the link costs nothing; top-k's 5 ms encode of the last key is exposed, the
  // early key's hides behind backward, where the tie goes to the faithful codec: none for both.
  CHECK(ChooseMethods(k, Link(1000)) == std::vector<int>{0, 0});
  // Between: the step the choice predicts is never more than the tie above any uniform one's.
  for (double gbps : {0.3, 1.0, 3.0, 10.0, 30.0}) {
    const auto choice = ChooseMethods(k, Link(gbps));
    for (int m = 0; m < 3; ++m) {
      INFO(gbps << " Gbit/s, every key under method " << m);
      CHECK(Step(k, choice, Link(gbps)) <=
            Step(k, std::vector<int>(2, m), Link(gbps)) * (1 + kAutoTie) + 1e-9);
    }
  }
}

TEST_CASE("compress.auto sends uncompressed when compressing saves under the tie", "[auto]") {
  // 30 Gbit/s: 4 MB dense is 1.07 ms each way. Top-k (encode 0.2 ms, as cheap as none's
  // copy) predicts the step 2.1 ms shorter than none, 6%: top-k.
  KeyCalibration k = TwoKeys(/*topk_encode_ms=*/0.2);
  CHECK(ChooseMethods(k, Link(30)) == std::vector<int>{2, 2});
  // At 300 Gbit/s top-k saves 0.2 ms of a 31 ms step (0.7%): a tie, none everywhere, although
  // top-k predicts the shorter step.
  CHECK(Step(k, {2, 2}, Link(300)) < Step(k, {0, 0}, Link(300)));
  CHECK(ChooseMethods(k, Link(300)) == std::vector<int>{0, 0});
}

TEST_CASE("compress.auto mixes codecs where a mix is shorter than every uniform choice", "[auto]") {
  // 1 Gbit/s. The output layer's 40 MB (ready at 2 ms) takes 320 ms each way dense: top-k,
  // whose 5 ms encode hides behind backward. The input layer's 40 KB (ready last) moves in
  // 0.3 ms dense, where top-k's encode would add 5 ms after backward: none or fp16.
  KeyCalibration k = TwoKeys(/*topk_encode_ms=*/5);
  for (auto& method : k.cost) {
    for (KeyCost* c : {&method[0]}) {
      c->dense_bytes /= 100;
      c->bytes_up /= 100;
      c->bytes_down /= 100;
    }
    for (KeyCost* c : {&method[1]}) {
      c->dense_bytes *= 10;
      c->bytes_up *= 10;
      c->bytes_down *= 10;
    }
  }
  const auto choice = ChooseMethods(k, Link(1));
  CHECK(choice[0] != 2);
  CHECK(choice[1] == 2);
  for (int m = 0; m < 3; ++m)
    CHECK(Step(k, choice, Link(1)) < Step(k, std::vector<int>(2, m), Link(1)) * (1 - kAutoTie));
  // A key whose transfer the model says hides behind backward is not moved to a more faithful
  // codec on that word alone: at 3 Gbit/s, with top-k's encode 3 ms, fp16 would keep the early
  // key's step equal, and it stays top-k.
  CHECK(ChooseMethods(TwoKeys(/*topk_encode_ms=*/3), Link(3)) == std::vector<int>{2, 2});
}

TEST_CASE("a choice's buckets sum their keys and go in backward order", "[auto]") {
  KeyCalibration k = TwoKeys(5);
  k.split = {2};  // one bucket of both keys
  const Calibration one = Assemble(k, {0, 2}, "mixed");
  REQUIRE(one.buckets.size() == 1);
  CHECK(one.buckets[0].bytes_up == 4'000'000 + 40'000);
  CHECK(one.buckets[0].encode_ms == Approx(5.2));
  CHECK(one.buckets[0].ready_ms == 20);  // when its last key is ready
  k.split = {1, 1};
  const Calibration two = Assemble(k, {0, 0}, "none");
  REQUIRE(two.buckets.size() == 2);
  CHECK(two.buckets[0].ready_ms == 2);  // the output layer's key first
  CHECK_THROWS_AS(Assemble(k, {0}, "short"), InvalidArgument);
  CHECK_THROWS_AS(Assemble(k, {0, 3}, "no such method"), InvalidArgument);
}

TEST_CASE("per-key push codecs encode each key with its own codec", "[auto]") {
  ClientOptions o;
  o.push = ParseCodecShorthand("topk ratio=0.1");
  o.min_numel = 10;
  KeyCodecs codecs(o);
  const std::vector<compressors::TensorSpec> model = {
      {"a", {100}}, {"b", {100}}, {"c", {100}}, {"small", {4}}};
  codecs.SetModel(model, {});
  std::vector<torch::Tensor> grads;
  for (const auto& s : model) grads.push_back(torch::randn(s.shape));
  auto codecs_of = [&] {
    StepMetrics m;
    std::vector<std::string> out;
    for (const KeyPush& p : codecs.Encode(0, grads, 0, model.size(), &m))
      out.push_back(p.payload.payload.codec);
    return out;
  };
  CHECK(codecs_of() == std::vector<std::string>{"topk", "topk", "topk", "none"});
  CodecSpec fp16;
  fp16.codec = "fp16";
  codecs.SetKeyPushCodecs({CodecSpec{}, fp16, o.push, o.push});
  CHECK(codecs_of() == std::vector<std::string>{"none", "fp16", "topk", "none"});
  // The state saved under those codecs loads back under them.
  const std::string state = codecs.SaveState();
  codecs.LoadState(state);
  CHECK(codecs_of() == std::vector<std::string>{"none", "fp16", "topk", "none"});
  // Registering the same model again keeps the choice; a bad one changes nothing.
  codecs.SetModel(model, {});
  CHECK(codecs_of() == std::vector<std::string>{"none", "fp16", "topk", "none"});
  CHECK_THROWS_AS(codecs.SetKeyPushCodecs({fp16}), InvalidArgument);
  CodecSpec bad;
  bad.codec = "no-such-codec";
  CHECK_THROWS_AS(codecs.SetKeyPushCodecs({bad, bad, bad, bad}), InvalidArgument);
  CHECK(codecs_of() == std::vector<std::string>{"none", "fp16", "topk", "none"});
  // Dynamic compression's one codec for every key replaces the choice.
  codecs.SetPushCodec(fp16);
  CHECK(codecs_of() == std::vector<std::string>{"fp16", "fp16", "fp16", "none"});
}

TEST_CASE("compress.auto's config is refused with the key to fix", "[auto]") {
  const std::string topk = "push: {codec: topk, ratio: 0.01}\n";
  auto refusal = [](const std::string& yaml) {  // the message, or "accepted"
    try {
      ParseConfig(yaml);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  CHECK_NOTHROW(ParseConfig(topk + "compress: {auto: true, link_gbps: 1, topology: links}"));
  CHECK(refusal(topk + "compress: {auto: true}").find("compress.link_gbps") != std::string::npos);
  CHECK(refusal(topk + "compress: {auto: true, link_gbps: 1, warmup_epochs: 2}")
            .find("compress.warmup_epochs") != std::string::npos);
  CHECK(refusal(topk + "compress: {auto: true, link_gbps: 1, topology: ring}")
            .find("compress.topology") != std::string::npos);
  CHECK(
      refusal(topk + "compress: {auto: true, link_gbps: 1}\nsync: {every: 4}").find("sync.every") !=
      std::string::npos);
  // push none: nothing to choose
  CHECK(refusal("compress: {auto: true, link_gbps: 1}").find("push.codec") != std::string::npos);
}

}  // namespace
}  // namespace gradpress::worker
