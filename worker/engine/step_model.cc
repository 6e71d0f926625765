#include "worker/engine/step_model.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"

namespace gradpress::worker {
namespace {

// ms to move `bytes` at `gbps`.
double TransferMs(double bytes, double gbps) { return bytes * 8.0 / (gbps * 1e9) * 1e3; }

}  // namespace

StepPrediction PredictStep(const Calibration& c, const Cluster& k) {
  GP_ENFORCE(k.workers >= 1 && k.shards >= 1, "a cluster needs a worker and a shard, not ",
             k.workers, " and ", k.shards);
  GP_ENFORCE(k.rate_gbps > 0 && k.latency_ms >= 0, "link rate ", k.rate_gbps,
             " Gbit/s and latency ", k.latency_ms, " ms: the rate must be positive");
  GP_ENFORCE(k.compute_scale > 0, "compute scale ", k.compute_scale, " must be positive");
  const double w = k.workers, s = k.shards, x = k.compute_scale;
  const double forward = x * c.forward_ms, backward = x * c.backward_ms,
               optimizer = x * c.optimizer_ms;
  StepPrediction p;
  p.compute_ms = forward + backward + optimizer;
  double encoder = 0, uplink = 0, server = 0, downlink = 0, decoder = 0, last = 0;
  for (const BucketProfile& b : c.buckets) {
    const double ready = k.overlap ? std::min(x * b.ready_ms, backward) : backward;
    const double encoded = std::max(ready, encoder) + x * b.encode_ms;
    encoder = encoded;
    // The worker's link, or the shard's link carrying every worker's share, whichever is longer.
    const double share = k.star ? w / s : 1;  // of a bucket's bytes on the server's link
    const double up =
        std::max(TransferMs(b.bytes_up, k.rate_gbps), TransferMs(share * b.bytes_up, k.rate_gbps));
    const double up_start = std::max(encoded, uplink);
    uplink = up_start + up;
    const double arrived = uplink + k.latency_ms;
    // Each shard decodes and adds its share of every worker's push as they stream in; the
    // last one's add and the finalize follow the last arrival.
    const double pushes = w * b.push_ms / s;
    const double finalized =
        std::max({arrived + b.push_ms / s, server + pushes}) + b.finalize_ms / s;
    server = finalized;
    const double down = std::max(TransferMs(b.bytes_down, k.rate_gbps),
                                 TransferMs(share * b.bytes_down, k.rate_gbps));
    const double down_start = std::max(finalized, downlink);
    downlink = down_start + down;
    const double received = downlink + k.latency_ms;
    decoder = std::max(received, decoder) + x * b.decode_ms;
    last = std::max(last, decoder);
    p.bytes_up += b.bytes_up;
    p.bytes_down += b.bytes_down;
  }
  p.step_ms = forward + std::max(backward, last) + optimizer;
  p.exposed_comm_ms = p.step_ms - p.compute_ms;
  return p;
}

double CrossoverRate(const Calibration& a, const Calibration& b, Cluster cluster, double lo,
                     double hi, double steps_a, double steps_b) {
  auto diff = [&](double gbps) {
    cluster.rate_gbps = gbps;
    return steps_a * PredictStep(a, cluster).step_ms - steps_b * PredictStep(b, cluster).step_ms;
  };
  double dl = diff(lo), dh = diff(hi);
  if ((dl < 0) == (dh < 0)) return 0;
  for (int i = 0; i < 60; ++i) {
    const double mid = std::sqrt(lo * hi);
    const double dm = diff(mid);
    if ((dm < 0) == (dl < 0)) {
      lo = mid;
      dl = dm;
    } else {
      hi = mid;
    }
  }
  return std::sqrt(lo * hi);
}

}  // namespace gradpress::worker
