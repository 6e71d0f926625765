#include "server/aggregation.h"

#include <algorithm>

#include "common/error.h"
#include "common/timer.h"

namespace gradpress::server {

int64_t Lane::LastStep(const std::string& worker) const {
  auto it = last_step.find(worker);
  return it == last_step.end() ? -1 : it->second;
}

std::shared_ptr<const StepResult> Lane::Find(int64_t s) const {
  for (const auto& r : results)
    if (r->step == s) return r;
  return nullptr;
}

void Aggregation::Split(const std::vector<int>& bucket_keys, size_t keys, int64_t step) {
  std::vector<std::unique_ptr<Lane>> lanes;
  size_t begin = 0;
  const std::vector<int> whole{static_cast<int>(keys)};
  for (int n : bucket_keys.empty() ? whole : bucket_keys) {
    auto lane = std::make_unique<Lane>();
    lane->index = static_cast<int>(lanes.size());
    lane->begin = begin;
    lane->end = begin += static_cast<size_t>(n);
    lane->step = step;
    for (const auto& old : lanes_) {
      for (const auto& [name, s] : old->last_step)
        lane->last_step[name] = std::max(lane->LastStep(name), s);
    }
    lanes.push_back(std::move(lane));
  }
  lanes_ = std::move(lanes);
  split_ = bucket_keys;
}

Lane& Aggregation::Of(int bucket, const WorkerId& w) {
  if (bucket < 0) {
    GP_ENFORCE(lanes_.size() == 1, "worker '", w.name, "': this job pushes by bucket (",
               lanes_.size(), " buckets registered); the push names none");
    return *lanes_.front();
  }
  GP_ENFORCE(static_cast<size_t>(bucket) < lanes_.size(), "worker '", w.name, "': bucket ", bucket,
             " outside the ", lanes_.size(), " registered");
  return *lanes_[bucket];
}

bool Aggregation::Idle() const {
  for (const auto& lane : lanes_)
    if (!lane->Idle()) return false;
  return true;
}

bool Aggregation::Even() const {
  for (const auto& lane : lanes_)
    if (lane->step != lanes_.front()->step) return false;
  return true;
}

void Aggregation::SetStep(int64_t step) {
  for (auto& lane : lanes_) lane->step = step;
}

std::shared_ptr<const StepResult> Aggregation::Joined(int64_t step) const {
  auto joined = std::make_shared<StepResult>();
  joined->step = step;
  for (const auto& lane : lanes_) {
    auto r = lane->Find(step);
    if (!r) return nullptr;
    joined->contributors = std::max(joined->contributors, r->contributors);
    joined->server_ms += r->server_ms;
    joined->payloads.insert(joined->payloads.end(), r->payloads.begin(), r->payloads.end());
  }
  return joined;
}

bool Aggregation::Ready(const Lane& lane, const Membership& members) {
  return lane.contributors > 0 && !lane.accum_owned && members.AllLiveIn(lane.pushed);
}

std::shared_ptr<const StepResult> Aggregation::Finalize(Lane& lane, ModelState* model,
                                                        const StoreOptions& opt, ThreadPool* pool) {
  Closing c = Close(lane);
  auto result = Compute(lane, &c, model, opt, pool);
  Publish(lane, c, result);
  return result;
}

Aggregation::Closing Aggregation::Close(Lane& lane) {
  Closing c;
  c.step = lane.step;
  c.contributors = lane.contributors;
  c.apply_ms = lane.apply_ms;
  c.lr = lane.lr;
  c.key_lr = std::move(lane.key_lr);
  // The previous result's buffers, unless a pull still holds it: no fresh pages per step.
  if (lane.results.size() == 1 && lane.results.front().use_count() == 1) {
    for (auto& kp : std::const_pointer_cast<StepResult>(lane.results.front())->payloads)
      c.spare.push_back(std::move(kp.payload.bytes));
  } else if (!lane.results.empty()) {
    c.previous = lane.results.back();
  }
  lane.results.clear();  // only the newest is kept: the one being made
  lane.finalizing = true;
  return c;
}

std::shared_ptr<StepResult> Aggregation::Compute(const Lane& lane, Closing* c, ModelState* model,
                                                 const StoreOptions& opt, ThreadPool* pool) {
  Timer t;
  c->previous.reset();  // its pages freed here, if this was the last holder
  ModelState& m = *model;
  // Mean of the pushes received; exchange=weights then steps the optimizer on it. A mean
  // sent uncompressed is scaled while Encode copies it; the others are scaled in place.
  const float inv = 1.f / static_cast<float>(c->contributors);
  SgdOptions sgd = opt.sgd;
  if (c->lr) sgd.lr = *c->lr;
  const auto blocks = m.Blocks(lane.begin, lane.end);
  pool->ParallelFor(static_cast<int64_t>(blocks.size()), [&](int64_t j) {
    const auto [i, begin, end] = blocks[j];
    if (!opt.exchange_weights && m.PullIsNone(i)) return;
    float* a = m.key(i).accum.data();
    for (int64_t e = begin; e < end; ++e) a[e] *= inv;
  });
  if (opt.exchange_weights) {
    pool->ParallelFor(static_cast<int64_t>(lane.keys()), [&](int64_t j) {
      KeyState& k = m.key(lane.begin + j);
      SgdOptions key = sgd;  // the key's param group's lr, when the push named one
      if (!c->key_lr.empty()) key.lr = c->key_lr[j];
      SgdStep(key, k.weights.data(), k.accum.data(), k.numel, &k.sgd);
    });
  }
  std::shared_ptr<StepResult> result =
      m.Encode(c->step, opt.exchange_weights, false, lane.begin, lane.end,
               opt.exchange_weights ? 1.f : inv, &c->spare);
  if (opt.shadow_weights && !opt.exchange_weights) {
    // The workers' own update on the mean just sent (the accumulator is still this step's:
    // the next step's pushes wait for the lane's finalize to end).
    SgdOptions shadow_all = opt.shadow_sgd;
    if (c->lr) shadow_all.lr = *c->lr;
    pool->ParallelFor(static_cast<int64_t>(lane.keys()), [&](int64_t j) {
      const size_t i = lane.begin + j;
      KeyState& k = m.key(i);
      SgdOptions shadow = shadow_all;
      if (!c->key_lr.empty()) shadow.lr = c->key_lr[j];
      if (m.PullIsNone(i)) {
        for (float& a : k.accum) a *= inv;  // not yet scaled in place (see above)
        SgdStep(shadow, k.weights.data(), k.accum.data(), k.numel, &k.sgd);
        return;
      }
      // A compressed pull: the workers step on what they decode, not on the exact mean. A
      // sparse one steps from its kept elements; else the accumulator, free once encoded,
      // takes the decode (no buffer per step).
      const compressors::Payload& p = result->payloads[j].payload;
      const compressors::Compressor& decoder = m.Decoder(p.codec);
      thread_local std::vector<int32_t> idx;  // the pool thread's, reused step after step
      thread_local std::vector<float> val;
      if (decoder.DecodeSparse(p.bytes, k.numel, &idx, &val)) {
        SgdStepSparse(shadow, k.weights.data(), idx, val, k.numel, &k.sgd);
        return;
      }
      decoder.DecodeTo(p.bytes, k.numel, k.accum.data());
      SgdStep(shadow, k.weights.data(), k.accum.data(), k.numel, &k.sgd);
    });
  }
  c->compute_ms = t.ElapsedMs();
  return result;
}

void Aggregation::Publish(Lane& lane, const Closing& c, const std::shared_ptr<StepResult>& result) {
  lane.accum_holders = 0;  // the next step's first push overwrites the accumulator
  result->contributors = c.contributors;
  result->server_ms = c.compute_ms + c.apply_ms / c.contributors;
  lane.results.push_back(result);  // the only one: Close took the previous out
  ++lane.step;
  lane.pushed.clear();
  lane.contributors = 0;
  lane.apply_ms = 0;
  lane.lr.reset();
  lane.key_lr.clear();
  lane.finalizing = false;
}

}  // namespace gradpress::server
