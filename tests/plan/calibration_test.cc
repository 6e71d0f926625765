// Calibration (plan/calibration.h) on LeNet-5 and synthetic data: every bucket measured, the
// codec's bytes as the codec makes them, and the saved form read back unchanged.
#include "plan/calibration.h"

#include <catch2/catch.hpp>

#include "worker/engine/auto_codecs.h"

namespace gradpress::plan {
namespace {

Config Job() {
  return ParseConfig("{}", "<test>",
                     {"model=lenet", "dataset.name=synthetic", "train.batch_size=16",
                      "sync.bucket_mb=0.01", "compress.min_numel=1000"});
}

TEST_CASE("calibration measures every bucket of the job's model") {
  const std::vector<Calibration> both = Calibrate(Job(), {"none", "topk ratio=0.01"}, 2);
  REQUIRE(both.size() == 2);
  const Calibration& none = both[0];
  const Calibration& topk = both[1];
  CHECK(topk.backward_ms == none.backward_ms);  // one compute profile
  REQUIRE(none.buckets.size() >= 3);            // 0.01 MiB buckets of LeNet-5
  REQUIRE(topk.buckets.size() == none.buckets.size());
  CHECK(none.forward_ms > 0);
  CHECK(none.backward_ms > 0);
  int64_t dense = 0, up_none = 0, up_topk = 0;
  for (size_t b = 0; b < none.buckets.size(); ++b) {
    dense += none.buckets[b].dense_bytes;
    up_none += none.buckets[b].bytes_up;
    up_topk += topk.buckets[b].bytes_up;
    CHECK(none.buckets[b].ready_ms <= none.backward_ms);
    if (b > 0) CHECK(none.buckets[b].ready_ms >= none.buckets[b - 1].ready_ms);
  }
  CHECK(dense == 61706 * 4);  // LeNet-5's parameters
  CHECK(up_none >= dense);    // codec none: the floats and a header per key
  CHECK(up_topk * 10 < up_none);
  CHECK(topk.method == "topk ratio=0.01");
}

TEST_CASE("compress.auto's choice for a cluster: top-k on a slow link, none on a fast one") {
  Config c = Job();
  c.push = ParseCodecShorthand("topk ratio=0.01 error_feedback=true");
  c.pull = c.push;
  Cluster slow;
  slow.workers = 64;
  slow.rate_gbps = 0.001;
  worker::KeyCalibration k;
  const worker::AutoChoice a = worker::ChooseKeyCodecs(c, slow, 1, &k);
  REQUIRE(a.method.size() == k.keys());
  REQUIRE(a.uniform_ms.size() == 3);
  for (size_t i = 0; i < k.keys(); ++i) {
    INFO(k.names[i]);
    CHECK(a.method[i] == (k.compressed[i] ? 2 : 0));  // 64 workers on 1 Mbit/s: compress all
    CHECK(a.push[i].codec == (k.compressed[i] ? "topk" : "none"));
  }
  CHECK(a.step_ms < a.uniform_ms[0]);
  const std::vector<std::string> lines = a.Describe(k);
  CHECK(lines.size() == k.keys() + 1);
  CHECK(lines.back().find("predicted step") != std::string::npos);
  Cluster fast = slow;
  fast.workers = 2;
  fast.rate_gbps = 1e5;  // the link costs nothing: nothing is worth compressing
  const worker::AutoChoice b = worker::ChooseKeyCodecs(c, fast, 1, &k);
  for (int m : b.method) CHECK(m == 0);
}

TEST_CASE("a calibration is saved and read back unchanged; a wrong file is named") {
  const Calibration c = Calibrate(Job(), {"fp16"}, 1).at(0);
  const Calibration back = CalibrationFromYaml(CalibrationYaml(c));
  CHECK(back.method == c.method);
  CHECK(back.backward_ms == c.backward_ms);
  REQUIRE(back.buckets.size() == c.buckets.size());
  CHECK(back.buckets[0].bytes_up == c.buckets[0].bytes_up);
  CHECK(back.buckets[0].ready_ms == c.buckets[0].ready_ms);
  CHECK_THROWS_WITH(CalibrationFromYaml("{method: x}"),
                    Catch::Contains("not a gradpress-plan calibration"));
}

}  // namespace
}  // namespace gradpress::plan
