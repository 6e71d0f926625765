#pragma once
// The step-time model (gradpress-plan and compress.auto, docs/planner.md): one training step
// of a worker predicted from a calibration of the model and codecs (calibration.h) for a
// cluster of W workers, S server shards, a link rate and a latency, following the pipeline
// the code runs (worker/engine/bucket_scheduler.h, server/aggregation.h):
//
//   forward | backward, buckets ready in backward order at ready_ms
//           | each bucket: encode (one at a time) -> uplink (one bucket at a time, the
//           |   bucket nearest the input first among those waiting) -> the server shards:
//           |   every worker's push decoded and added, then the bucket finalised (mean, pull
//           |   encode) -> downlink (one at a time) -> decode
//   optimizer step once every bucket is back.
//
// Links are full duplex. In a star (the default) each host has one link of `rate_gbps`; a
// shard's link carries W workers' share (1/S) of every bucket, so a transfer takes the longer
// of the worker's own link time and the shard link's; with star false every worker has its
// own link into the server and only its own link counts. overlap=false is the serial step: every
// bucket waits for the end of backward. The model is symmetric (all workers alike) and
// deterministic; it ignores the server's CPU contention between shards on one host and
// retransmissions.
//
//   StepPrediction p = PredictStep(calibration, {.workers = 16, .shards = 2, .rate_gbps = 10});
//
// Thread-safety: pure functions. Cost: O(buckets).
#include <cstdint>
#include <string>
#include <vector>

namespace gradpress::worker {

// One bucket of the model, as measured on one worker (ms, payload bytes).
struct BucketProfile {
  double ready_ms = 0;     // since backward started, when its last gradient exists
  double encode_ms = 0;    // the push codec on its keys (error feedback included)
  double decode_ms = 0;    // the pull codec's decode of its keys on the worker
  double push_ms = 0;      // the server's decode and add of one worker's push of it
  double finalize_ms = 0;  // the server's mean and pull encode of it (once per step)
  int64_t bytes_up = 0, bytes_down = 0;
  int64_t dense_bytes = 0;  // float32 bytes of its keys
};

// A calibration: one method (codecs) on one model and batch.
struct Calibration {
  std::string method;  // a label, e.g. the codec shorthand
  double forward_ms = 0, backward_ms = 0, optimizer_ms = 0;
  std::vector<BucketProfile> buckets;  // in backward order (the first ready first)
};

struct Cluster {
  int workers = 2;
  int shards = 1;
  double rate_gbps = 1;   // every host's link, each direction
  double latency_ms = 0;  // one way
  bool overlap = true;    // pipelined buckets (sync.overlap); false: the serial step
  // star: each shard's one link carries its workers' traffic (hosts behind a switch,
  // netem.sh --topology star); false: a link per worker into the server (--topology links).
  bool star = true;
  // Worker-side times (compute, encode, decode) x this: workers slower than the calibrating
  // one, e.g. W workers sharing C < W cores of one machine (W / C).
  double compute_scale = 1;
};

struct StepPrediction {
  double step_ms = 0;
  double compute_ms = 0;                 // forward + backward + optimizer
  double exposed_comm_ms = 0;            // step_ms - compute_ms: what communication adds
  int64_t bytes_up = 0, bytes_down = 0;  // per worker per step
};

StepPrediction PredictStep(const Calibration& c, const Cluster& cluster);

// The link rate (Gbit/s) in [lo, hi] at which two methods' predicted steps are equal, found by
// bisection on a log scale; 0 when one is faster over the whole range. With step counts
// (the steps each needs to reach an accuracy) it compares steps_a x step_a with
// steps_b x step_b: the times to that accuracy.
double CrossoverRate(const Calibration& a, const Calibration& b, Cluster cluster, double lo,
                     double hi, double steps_a = 1, double steps_b = 1);

}  // namespace gradpress::worker
