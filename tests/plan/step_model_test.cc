// The planner's step model (worker/engine/step_model.h): hand-computed pipelines, and the
// properties a user relies on (overlap never slower than serial, the shared server link,
// crossovers).
#include "worker/engine/step_model.h"

#include <catch2/catch.hpp>

#include "plan/report.h"

namespace gradpress::plan {
namespace {

// Two buckets: ready at 4 and 10 ms of a 10 ms backward.
Calibration TwoBuckets(int64_t bytes) {
  Calibration c;
  c.method = "test";
  c.forward_ms = 5;
  c.backward_ms = 10;
  c.optimizer_ms = 1;
  BucketProfile a, b;
  a.ready_ms = 4;
  b.ready_ms = 10;
  for (BucketProfile* p : {&a, &b}) {
    p->encode_ms = 1;
    p->decode_ms = 1;
    p->push_ms = 0.5;
    p->finalize_ms = 2;
    p->bytes_up = p->bytes_down = bytes;
    p->dense_bytes = bytes;
  }
  c.buckets = {a, b};
  return c;
}

TEST_CASE("step model: a serial step adds every stage after backward") {
  // 1 MB at 1 Gbit/s = 8 ms each way. Worker 1 of 1, one shard, no latency.
  Cluster k;
  k.workers = 1;
  k.rate_gbps = 1;
  k.overlap = false;
  const StepPrediction p = PredictStep(TwoBuckets(1000000), k);
  // Bucket 0: encoded 11, up 19, server 19 + 0.5 + 2 = 21.5, down 29.5, decoded 30.5.
  // Bucket 1: encoded 12, up 27, server max(27.5, 21.5 + 0.5) + 2 = 29.5, down 37.5, 38.5.
  CHECK(p.step_ms == Approx(5 + 38.5 + 1));
  CHECK(p.compute_ms == Approx(16));
  CHECK(p.exposed_comm_ms == Approx(28.5));
  CHECK(p.bytes_up == 2000000);
  CHECK(p.bytes_down == 2000000);
}

TEST_CASE("step model: overlap starts a bucket when backward produced it") {
  Cluster k;
  k.workers = 1;
  k.rate_gbps = 1;
  const StepPrediction pipelined = PredictStep(TwoBuckets(1000000), k);
  // Bucket 0 leaves at 4: encoded 5, up 13, server 15.5, down 23.5, decoded 24.5; bucket 1
  // as in the serial step but its uplink is free at 13: encoded 11, up 19, server 21.5,
  // down max(21.5, 23.5) + 8 = 31.5, decoded 32.5.
  CHECK(pipelined.step_ms == Approx(5 + 32.5 + 1));
  k.overlap = false;
  CHECK(pipelined.step_ms < PredictStep(TwoBuckets(1000000), k).step_ms);
}

TEST_CASE("step model: the server's link is shared by its workers, split by its shards") {
  Cluster k;
  k.rate_gbps = 1;
  k.workers = 8;
  const double one_shard = PredictStep(TwoBuckets(1000000), k).step_ms;
  k.star = false;  // a link per worker: nobody shares a link
  const double links = PredictStep(TwoBuckets(1000000), k).step_ms;
  k.star = true;
  k.shards = 8;
  const double eight_shards = PredictStep(TwoBuckets(1000000), k).step_ms;
  k.workers = 1;
  k.shards = 1;
  const double alone = PredictStep(TwoBuckets(1000000), k).step_ms;
  CHECK(one_shard > eight_shards);
  CHECK(eight_shards == Approx(alone).margin(3));  // the push and finalize shares remain
  CHECK(links == Approx(alone).margin(4));         // 8 workers' pushes on one server
  k.latency_ms = 5;
  CHECK(PredictStep(TwoBuckets(1000000), k).step_ms == Approx(alone + 10));  // up and down
}

TEST_CASE("step model: fewer bytes win on a slow link and lose to a cheaper codec on a fast one") {
  Calibration dense = TwoBuckets(4000000), sparse = TwoBuckets(40000);
  for (auto& b : dense.buckets) b.encode_ms = b.decode_ms = 0.1;
  for (auto& b : sparse.buckets) b.encode_ms = b.decode_ms = 6;
  sparse.method = "sparse";
  dense.method = "dense";
  Cluster k;
  k.workers = 4;
  k.rate_gbps = 0.1;
  CHECK(PredictStep(sparse, k).step_ms < PredictStep(dense, k).step_ms);
  k.rate_gbps = 100;
  CHECK(PredictStep(sparse, k).step_ms > PredictStep(dense, k).step_ms);
  const double x = CrossoverRate(dense, sparse, k, 0.1, 100);
  REQUIRE(x > 0.1);
  REQUIRE(x < 100);
  k.rate_gbps = x;
  CHECK(PredictStep(sparse, k).step_ms == Approx(PredictStep(dense, k).step_ms).epsilon(0.01));
  k.rate_gbps = 100;
  CHECK(Suggest({sparse, dense}, k).find("'dense' is fastest") != std::string::npos);
}

TEST_CASE("step model: a compute scale stretches the worker's side, not the links") {
  Cluster k;
  k.workers = 1;
  k.rate_gbps = 1;
  k.overlap = false;
  const StepPrediction one = PredictStep(TwoBuckets(1000000), k);
  k.compute_scale = 2;
  const StepPrediction two = PredictStep(TwoBuckets(1000000), k);
  CHECK(two.compute_ms == Approx(2 * one.compute_ms));
  // Forward, backward and optimizer double (16 ms more); the serial step's tail after
  // backward keeps its links and server, and its encodes and decodes double (2 ms more).
  CHECK(two.step_ms == Approx(one.step_ms + 16 + 2));
}

TEST_CASE("step model: a cluster without workers or a rate is refused") {
  Cluster k;
  k.workers = 0;
  CHECK_THROWS_WITH(PredictStep(TwoBuckets(1), k), Catch::Contains("a worker and a shard"));
  k.workers = 1;
  k.rate_gbps = 0;
  CHECK_THROWS_WITH(PredictStep(TwoBuckets(1), k), Catch::Contains("must be positive"));
}

}  // namespace
}  // namespace gradpress::plan
