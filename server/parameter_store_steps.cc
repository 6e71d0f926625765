// ParameterStore, part two: the step flow (push, barrier, finalize, async, pull) and the
// liveness and counters around it. Registration and validation are in parameter_store.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <sstream>
#include <tuple>

#include "common/error.h"
#include "common/tensor_bytes.h"
#include "common/timer.h"
#include "compressors/none.h"
#include "server/parameter_store.h"
#include "server/parameter_store_lane.h"

namespace gradpress::server {

using compressors::Payload;

PushPullResult ParameterStore::AsyncPush(const WorkerId& w, int64_t step, int64_t base_step,
                                         const std::vector<float*>& grads, uint64_t bytes,
                                         std::optional<double> lr) {
  std::lock_guard<std::mutex> lock(mu_);
  lanes_.front()->in_flight.erase(w.name);  // async: one lane
  WorkerState& ws = workers_.at(w.name);
  if (step <= ws.async_step) {
    ++stats_.duplicates;
    return {AsyncWeights(), 0, 0, true};
  }
  // Re-check staleness: other pushes may have landed while this one was validated.
  if (step_ - base_step > opt_.max_staleness) {
    ++stats_.rejected["stale_or_out_of_order"];
    throw FailedPrecondition("worker '" + w.name + "': push computed on step " +
                             std::to_string(base_step) + " became " +
                             std::to_string(step_ - base_step) + " steps stale (max_staleness " +
                             std::to_string(opt_.max_staleness) + ")");
  }
  Timer t;
  SgdOptions sgd = opt_.sgd;
  if (lr) sgd.lr = *lr;
  pool_.ParallelFor(static_cast<int64_t>(keys_.size()), [&](int64_t i) {
    KeyState& k = *keys_[i];
    SgdStep(sgd, k.weights.data(), grads[i], k.numel, &k.sgd);
  });
  stats_.bytes_in += bytes;
  ws.async_step = step;
  ++step_;
  lanes_.front()->step = step_;
  ++stats_.steps;
  MaybeCheckpoint();
  total_server_ms_ += t.ElapsedMs();
  return {AsyncWeights(), 0, t.ElapsedMs(), false};
}

void ParameterStore::MaybeFinalize(Lane& lane) {
  if (lane.contributors == 0 || lane.accum_owned) return;
  int registered = 0;  // restored members count once they registered again
  for (const auto& [name, ws] : workers_) registered += !ws.restored;
  if (registered < opt_.workers) {
    const auto waited = std::chrono::duration<double>(Clock::now() - first_register_).count();
    if (waited < opt_.worker_timeout_s) return;  // the others may still be starting
    if (lane.index == 0) {
      spdlog::warn("only {} of {} workers registered after {:.1f} s: step {} goes on without them",
                   registered, opt_.workers, waited, lane.step);
    }
  }
  for (const auto& [name, ws] : workers_)
    if (ws.live && !lane.pushed.count(name)) return;
  Timer t;
  // Mean of the pushes received; exchange=weights then steps the optimizer on it. A mean
  // sent uncompressed is scaled while Encode copies it; the others are scaled in place.
  const float inv = 1.f / static_cast<float>(lane.contributors);
  SgdOptions sgd = opt_.sgd;
  if (lane.lr) sgd.lr = *lane.lr;
  const auto blocks = Blocks(lane.begin, lane.end);
  pool_.ParallelFor(static_cast<int64_t>(blocks.size()), [&](int64_t j) {
    const auto [i, begin, end] = blocks[j];
    if (!opt_.exchange_weights && PlainNone(*keys_[i]->pull)) return;
    float* a = keys_[i]->accum.data();
    for (int64_t e = begin; e < end; ++e) a[e] *= inv;
  });
  if (opt_.exchange_weights) {
    pool_.ParallelFor(static_cast<int64_t>(lane.keys()), [&](int64_t j) {
      KeyState& k = *keys_[lane.begin + j];
      SgdStep(sgd, k.weights.data(), k.accum.data(), k.numel, &k.sgd);
    });
  }
  // The previous result's buffers, unless a pull still holds it: no fresh pages per step.
  if (lane.results.size() == 1 && lane.results.front().use_count() == 1) {
    for (auto& kp : std::const_pointer_cast<StepResult>(lane.results.front())->payloads)
      lane.spare_bytes.push_back(std::move(kp.payload.bytes));
    lane.results.clear();
  }
  std::shared_ptr<StepResult> result =
      Encode(lane.step, opt_.exchange_weights, false, lane.begin, lane.end,
             opt_.exchange_weights ? 1.f : inv, &lane.spare_bytes);
  if (opt_.shadow_weights && !opt_.exchange_weights) {
    // The workers' own update on the mean just sent (the accumulator is still this step's:
    // the next step's pushes wait for the lane's step to advance, under mu_).
    SgdOptions shadow = opt_.shadow_sgd;
    if (lane.lr) shadow.lr = *lane.lr;
    pool_.ParallelFor(static_cast<int64_t>(lane.keys()), [&](int64_t j) {
      const size_t i = lane.begin + j;
      KeyState& k = *keys_[i];
      if (PlainNone(*k.pull)) {
        for (float& a : k.accum) a *= inv;  // not yet scaled in place (see above)
        SgdStep(shadow, k.weights.data(), k.accum.data(), k.numel, &k.sgd);
        return;
      }
      // A compressed pull: the workers step on what they decode, not on the exact mean. The
      // accumulator is free once encoded: decode into it, no buffer per step.
      const compressors::Payload& p = result->payloads[j].payload;
      Decoder(p.codec).DecodeTo(p.bytes, k.numel, k.accum.data());
      SgdStep(shadow, k.weights.data(), k.accum.data(), k.numel, &k.sgd);
    });
  }
  lane.accum_holders = 0;  // the next step's first push overwrites the accumulator
  result->contributors = lane.contributors;
  result->server_ms = t.ElapsedMs() + lane.apply_ms / lane.contributors;
  lane.results.push_back(result);
  while (lane.results.size() > 1) lane.results.pop_front();  // the barrier orders steps
  total_server_ms_ += result->server_ms;
  ++lane.step;
  lane.pushed.clear();
  lane.contributors = 0;
  lane.apply_ms = 0;
  lane.lr.reset();
  step_cv_.notify_all();
  if (!LanesEven()) return;  // the step is complete once its last bucket is
  step_ = lane.step;
  ++stats_.steps;
  MaybeCheckpoint();
  if (opt_.stats_every > 0 && stats_.steps % opt_.stats_every == 0) {
    uint64_t rejected = 0;
    for (const auto& [reason, n] : stats_.rejected) rejected += n;
    spdlog::info(
        "step {}: {} workers, {:.1f} MB in, {:.1f} MB out, {:.2f} ms server/step, {} "
        "rejected",
        step_, result->contributors, stats_.bytes_in / 1e6, stats_.bytes_out / 1e6,
        total_server_ms_ / static_cast<double>(stats_.steps), rejected);
  }
}

void ParameterStore::MaybeFinalizeAll() {
  for (auto& lane : lanes_) MaybeFinalize(*lane);
}

bool ParameterStore::LanesEven() const {
  for (const auto& lane : lanes_)
    if (lane->step != lanes_.front()->step) return false;
  return true;
}

std::shared_ptr<const StepResult> ParameterStore::AsyncWeights() {
  if (!weights_result_ || weights_result_->step != step_)
    weights_result_ = Encode(step_, true, false, 0, keys_.size(), 1.f, nullptr);
  return weights_result_;
}

std::vector<std::tuple<size_t, int64_t, int64_t>> ParameterStore::Blocks(size_t first,
                                                                         size_t last) const {
  std::vector<std::tuple<size_t, int64_t, int64_t>> blocks;
  for (size_t i = first; i < last; ++i)
    for (int64_t b = 0; b < keys_[i]->numel; b += kBlock)
      blocks.emplace_back(i, b, std::min(keys_[i]->numel, b + kBlock));
  return blocks;
}

bool ParameterStore::PlainNone(const compressors::Compressor& c) {
  return dynamic_cast<const compressors::NoneCompressor*>(&c) != nullptr;
}

std::shared_ptr<StepResult> ParameterStore::Encode(int64_t step, bool weights, bool lossless,
                                                   size_t first, size_t last, float scale,
                                                   std::vector<std::string>* spare) {
  auto r = std::make_shared<StepResult>();
  r->step = step;
  const size_t n = last - first;
  r->payloads.resize(n);
  const bool recycle = spare != nullptr && spare->size() == n;
  std::vector<char> copy(n);  // fp32 values: copied block by block below
  for (size_t j = 0; j < n; ++j) {
    const size_t i = first + j;
    KeyPayload& out = r->payloads[j];
    out.key = model_[i].key;
    out.payload.shape = model_[i].shape;
    out.payload.dtype = model_[i].dtype;
    if (recycle) out.payload.bytes = std::move((*spare)[j]);
    copy[j] = lossless || PlainNone(*keys_[i]->pull);
    out.payload.codec = copy[j] ? "none" : keys_[i]->pull->Name();
    const size_t size = copy[j] ? keys_[i]->numel * sizeof(float) : 0;
    if (out.payload.bytes.size() != size) {  // a recycled buffer of the right size is
      out.payload.bytes.clear();             // overwritten as it is, not zeroed first
      out.payload.bytes.resize(size);
    }
  }
  if (spare) spare->clear();
  if (weights) scale = 1.f;
  const auto blocks = Blocks(first, last);
  pool_.ParallelFor(static_cast<int64_t>(blocks.size()), [&](int64_t b) {
    const auto [i, begin, end] = blocks[b];
    const size_t j = i - first;
    KeyState& k = *keys_[i];
    const float* src = weights ? k.weights.data() : k.accum.data();
    std::string& bytes = r->payloads[j].payload.bytes;
    if (!copy[j]) {  // a whole key per codec call, from its first block's item
      if (begin == 0) k.pull->EncodeTo(src, k.numel, {model_[i].key, step}, &bytes);
      return;
    }
    float* dst = reinterpret_cast<float*>(bytes.data());
    if (scale == 1.f) {
      std::memcpy(dst + begin, src + begin, (end - begin) * sizeof(float));
    } else {
      for (int64_t e = begin; e < end; ++e) dst[e] = src[e] * scale;
    }
  });
  return r;
}

std::shared_ptr<const StepResult> ParameterStore::Pull(const WorkerId& w, int64_t step,
                                                       Clock::time_point deadline, int bucket) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  GP_ENFORCE_AS(FailedPrecondition, initialized_, "the server has no weights yet");
  if (opt_.async) return AsyncWeights();
  const Lane* lane = bucket >= 0 || lanes_.size() == 1 ? &LaneOf(bucket, w) : nullptr;
  if (step < 0) {
    step = (lane ? lane->step : step_) - 1;
    GP_ENFORCE_AS(FailedPrecondition, step >= 0, "no step has completed yet");
  }
  auto done = [&] { return lane ? lane->step > step : step_ > step; };
  step_cv_.wait_until(lock, deadline, [&] { return shutdown_ || done(); });
  GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
  GP_ENFORCE_AS(Unavailable, done(), "timed out waiting for step ", step, "; retry");
  auto r = lane ? FindResult(*lane, step) : JoinedResult(step);
  GP_ENFORCE_AS(FailedPrecondition, r != nullptr, "result of step ", step,
                " is no longer kept (server step ", step_, ")");
  return r;
}

std::shared_ptr<const StepResult> ParameterStore::JoinedResult(int64_t step) const {
  auto joined = std::make_shared<StepResult>();
  joined->step = step;
  for (const auto& lane : lanes_) {
    auto r = FindResult(*lane, step);
    if (!r) return nullptr;
    joined->contributors = std::max(joined->contributors, r->contributors);
    joined->server_ms += r->server_ms;
    joined->payloads.insert(joined->payloads.end(), r->payloads.begin(), r->payloads.end());
  }
  return joined;
}

int64_t ParameterStore::Heartbeat(const WorkerId& w) {
  std::lock_guard<std::mutex> lock(mu_);
  CheckWorker(w);
  return step_;
}

void ParameterStore::CheckTimeouts() {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = Clock::now();
  const auto limit = std::chrono::duration<double>(opt_.worker_timeout_s);
  for (auto& [name, ws] : workers_) {
    if (ws.live && now - ws.last_seen > limit && !in_call_.count(name)) {
      ws.live = false;
      spdlog::warn("worker '{}' silent for {:.1f} s: dropped from the barrier at step {}", name,
                   std::chrono::duration<double>(now - ws.last_seen).count(), step_);
    }
  }
  MaybeFinalizeAll();  // a drop, or the registration grace ending, may complete the open step
  MaybeElect();
}

void ParameterStore::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutdown_ = true;
  step_cv_.notify_all();
}

void ParameterStore::CountBytesOut(uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.bytes_out += bytes;
}

void ParameterStore::CountFaultInjected() {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.faults_injected;
}

std::vector<TensorSpec> ParameterStore::model() const {
  std::lock_guard<std::mutex> lock(mu_);
  return model_;
}

int64_t ParameterStore::step() const {
  std::lock_guard<std::mutex> lock(mu_);
  return step_;
}

StoreStats ParameterStore::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  StoreStats s = stats_;
  s.live_workers = 0;
  for (const auto& [name, ws] : workers_) s.live_workers += ws.live;
  s.mean_server_ms = s.steps ? total_server_ms_ / static_cast<double>(s.steps) : 0.0;
  return s;
}

std::string StoreStats::Prometheus() const {
  std::ostringstream os;
  os << "# TYPE gradpress_steps_total counter\ngradpress_steps_total " << steps << "\n"
     << "# TYPE gradpress_bytes_in_total counter\ngradpress_bytes_in_total " << bytes_in << "\n"
     << "# TYPE gradpress_bytes_out_total counter\ngradpress_bytes_out_total " << bytes_out
     << "\n# TYPE gradpress_live_workers gauge\ngradpress_live_workers " << live_workers << "\n"
     << "# TYPE gradpress_step_server_ms gauge\ngradpress_step_server_ms " << mean_server_ms
     << "\n# TYPE gradpress_duplicate_pushes_total counter\ngradpress_duplicate_pushes_total "
     << duplicates << "\n# TYPE gradpress_faults_injected_total counter\n"
     << "gradpress_faults_injected_total " << faults_injected << "\n"
     << "# TYPE gradpress_rejected_total counter\n";
  for (const auto& [reason, n] : rejected)
    os << "gradpress_rejected_total{reason=\"" << reason << "\"} " << n << "\n";
  return os.str();
}

}  // namespace gradpress::server
