// The checks of device decodes that do not wait (worker/client/device_codecs.h: DecodeChecks, the
// StepCall::decoded a BucketScheduler hands each bucket's call): each added check runs once,
// before the bucket's results are reported usable, and a failing one fails the step with its
// own error. The GPU half (a malformed payload leaves its tensor unwritten) is in
// key_codecs_test.cc.
#include <atomic>
#include <string>
#include <utility>
#include <vector>

#include "common/error.h"
#include "tests/catch_torch.h"
#include "worker/client/device_codecs.h"
#include "worker/engine/bucket_scheduler.h"

namespace gradpress::worker {
namespace {

TEST_CASE("DecodeChecks runs each check once, throws the failing one's error, Clear drops",
          "[decode_checks]") {
  DecodeChecks checks;
  int ran = 0;
  checks.Add([&] { ++ran; });
  checks.Check();
  CHECK(ran == 1);
  checks.Check();  // nothing added since: nothing runs again
  CHECK(ran == 1);

  checks.Add([&] { ++ran; });
  checks.Add([] { throw InvalidArgument("topk: index gap out of range"); });
  CHECK_THROWS_AS(checks.Check(), InvalidArgument);
  CHECK(ran == 2);
  checks.Check();  // the failed batch is gone
  CHECK(ran == 2);

  checks.Add([&] { ++ran; });
  checks.Clear();
  checks.Check();
  CHECK(ran == 2);
}

// Answers PushPull by adding one check per call to call.decoded: bucket `bad`'s throws.
class CheckingClient : public PsClient {
 public:
  explicit CheckingClient(int bad) : bad_(bad) {}
  RegisterInfo Register(const std::vector<TensorSpec>&, const std::vector<int>&, int64_t) override {
    return {};
  }
  bool InitOrPull(std::vector<torch::Tensor>*) override { return true; }
  void AwaitInitWeights(std::vector<torch::Tensor>*) override {}
  StepMetrics PushPull(const StepCall& call, const std::vector<torch::Tensor>&,
                       std::vector<torch::Tensor>*) override {
    if (call.decoded == nullptr) {
      missing_ = true;
      return {};
    }
    const int bucket = call.bucket;
    const bool bad = bucket == bad_;
    call.decoded->Add([this, bucket, bad] {
      checked_[bucket].fetch_add(1);
      if (bad) throw InvalidArgument("qsgd: level exceeds s");
    });
    return {};
  }
  StepMetrics Pull(std::vector<torch::Tensor>*, int64_t) override { return {}; }
  int64_t Heartbeat() override { return 0; }
  std::pair<int, double> Elect(int64_t, double) override { return {0, 0}; }
  void PublishWeights(int64_t, const std::vector<torch::Tensor>&) override {}
  void PullWeights(std::vector<torch::Tensor>*, int64_t) override {}
  void PullMomentum(std::vector<torch::Tensor>*) override {}
  std::string StatsText() override { return {}; }
  void Broadcast(const std::string&, int64_t, bool, std::string*) override {}

  std::atomic<int> checked_[3] = {};
  std::atomic<bool> missing_{false};

 private:
  int bad_;
};

TEST_CASE("BucketScheduler runs a bucket's decode checks before WaitBucket reports it usable",
          "[decode_checks][overlap]") {
  const std::vector<int> split = {1, 1, 1};  // three buckets of one key each
  const std::vector<torch::Tensor> like = {torch::zeros({4}), torch::zeros({4}), torch::zeros({4})};
  std::vector<torch::Tensor> out = {torch::zeros({4}), torch::zeros({4}), torch::zeros({4})};

  SECTION("checks that pass: each bucket's runs once, by WaitBucket or at the latest by Wait") {
    CheckingClient client(/*bad=*/-1);
    BucketScheduler buckets(&client, split, /*threads=*/2);
    buckets.Begin(0, &out, std::nullopt);
    buckets.Seal(like);
    CHECK(buckets.WaitBucket(0));
    CHECK(client.checked_[0] == 1);
    buckets.Wait();
    CHECK_FALSE(client.missing_);
    for (int b = 0; b < 3; ++b) CHECK(client.checked_[b] == 1);
  }
  SECTION("a failing check fails WaitBucket and the step, with the check's error") {
    CheckingClient client(/*bad=*/1);
    BucketScheduler buckets(&client, split, /*threads=*/2);
    buckets.Begin(0, &out, std::nullopt);
    buckets.Seal(like);
    CHECK(buckets.WaitBucket(0));
    CHECK_FALSE(buckets.WaitBucket(1));
    CHECK(client.checked_[1] == 1);
    CHECK_THROWS_AS(buckets.Wait(), InvalidArgument);
    // The next step starts clean: its checks pass where they are not bucket 1's.
    buckets.Begin(1, &out, std::nullopt);
    buckets.Seal(like);
    CHECK(buckets.WaitBucket(0));
    CHECK(client.checked_[0] == 2);
  }
}

}  // namespace
}  // namespace gradpress::worker
