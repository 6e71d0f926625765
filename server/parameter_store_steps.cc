// ParameterStore, part two: the step flow (push, barrier, finalize, async, pull) and the
// liveness and counters around it. Registration and validation are in parameter_store.cc.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <sstream>

#include "common/error.h"
#include "common/timer.h"
#include "server/parameter_store.h"

namespace gradpress::server {

using compressors::Payload;

PushPullResult ParameterStore::PushPull(const WorkerId& w, int64_t step, int64_t base_step,
                                        std::vector<KeyPayload> pushes, Clock::time_point deadline,
                                        bool wait, std::optional<double> lr) {
  GP_ENFORCE(!lr || (std::isfinite(*lr) && *lr >= 0), "worker '", w.name, "': learning rate ",
             lr.value_or(0), " is not a finite number >= 0");
  // A worker inside a call (pushing, or waiting at the barrier) is alive.
  struct InCall {
    ParameterStore* s;
    const std::string& name;
    InCall(ParameterStore* store, const std::string& n) : s(store), name(n) {
      std::lock_guard<std::mutex> lock(s->mu_);
      ++s->in_call_[name];
    }
    ~InCall() {
      std::lock_guard<std::mutex> lock(s->mu_);
      if (--s->in_call_[name] == 0) s->in_call_.erase(name);
      auto it = s->workers_.find(name);
      if (it != s->workers_.end()) it->second.last_seen = Clock::now();
    }
  } in_call(this, w.name);
  {
    std::unique_lock<std::mutex> lock(mu_);
    GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
    try {
      WorkerState& ws = CheckWorker(w);
      GP_ENFORCE_AS(FailedPrecondition, initialized_, "the server has no initial weights yet");
      if (opt_.async) {
        if (step <= ws.last_step) return {AsyncWeights(), 0, 0, /*duplicate=*/true};
        GP_ENFORCE_AS(FailedPrecondition, step_ - base_step <= opt_.max_staleness, "worker '",
                      w.name, "': push computed on step ", base_step, " is ", step_ - base_step,
                      " steps stale (max_staleness ", opt_.max_staleness, ")");
      } else if (step < step_ || pushed_.count(w.name) || in_flight_.count(w.name)) {
        // Duplicate of a push already applied (or being applied): acknowledge, wait for the
        // step's result, never apply twice.
        GP_ENFORCE_AS(FailedPrecondition, step <= ws.last_step || in_flight_.count(w.name),
                      "worker '", w.name, "': push for step ", step,
                      " arrived after the step completed (server step ", step_, ")");
        Timer waited;
        step_cv_.wait_until(lock, deadline, [&] { return shutdown_ || step_ > step; });
        GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
        GP_ENFORCE_AS(Unavailable, step_ > step, "timed out waiting for step ", step,
                      " to complete; retry");
        auto r = FindResult(step);
        GP_ENFORCE_AS(FailedPrecondition, r != nullptr, "result of step ", step,
                      " is no longer kept (server step ", step_, ")");
        return {r, waited.ElapsedMs(), 0, /*duplicate=*/true};
      } else {
        GP_ENFORCE_AS(FailedPrecondition, step == step_, "worker '", w.name, "': push for step ",
                      step, " is ahead of the server's open step ", step_);
      }
      in_flight_.insert(w.name);
    } catch (const FailedPrecondition&) {
      ++stats_.rejected["stale_or_out_of_order"];
      throw;
    } catch (const NotFound&) {
      ++stats_.rejected["unknown_worker"];
      throw;
    }
  }
  Timer apply;
  std::vector<const Payload*> ordered;
  try {
    ordered = Validate(pushes);
    if (opt_.async) {
      auto r = AsyncPush(w, step, base_step, ordered, lr);
      r.apply_ms = apply.ElapsedMs();
      return r;
    }
    Accumulate(ordered);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    in_flight_.erase(w.name);
    throw;
  }
  uint64_t bytes = 0;
  for (const auto& kp : pushes) bytes += kp.payload.bytes.size();
  const double apply_ms = apply.ElapsedMs();
  std::unique_lock<std::mutex> lock(mu_);
  in_flight_.erase(w.name);
  pushed_.insert(w.name);
  ++contributors_;
  stats_.bytes_in += bytes;
  open_step_apply_ms_ += apply_ms;
  if (lr) open_step_lr_ = lr;
  auto ws = workers_.find(w.name);
  ws->second.last_step = step;
  MaybeFinalize();
  if (!wait) return {nullptr, 0, apply_ms, false};
  Timer waited;
  step_cv_.wait_until(lock, deadline, [&] { return shutdown_ || step_ > step; });
  GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
  GP_ENFORCE_AS(Unavailable, step_ > step, "timed out waiting for the other workers at step ", step,
                "; the push is kept: retry to wait again");
  return {FindResult(step), waited.ElapsedMs(), apply_ms, false};
}

PushPullResult ParameterStore::AsyncPush(const WorkerId& w, int64_t step, int64_t base_step,
                                         const std::vector<const Payload*>& ordered,
                                         std::optional<double> lr) {
  std::lock_guard<std::mutex> lock(mu_);
  in_flight_.erase(w.name);
  WorkerState& ws = workers_.at(w.name);
  if (step <= ws.last_step) return {AsyncWeights(), 0, 0, true};
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
    std::vector<float> grad(k.numel);
    Decoder(ordered[i]->codec).DecodeTo(ordered[i]->bytes, k.numel, grad.data());
    SgdStep(sgd, k.weights.data(), grad.data(), k.numel, &k.sgd);
  });
  for (const auto* p : ordered) stats_.bytes_in += p->bytes.size();
  ws.last_step = step;
  ++step_;
  ++stats_.steps;
  MaybeCheckpoint();
  total_server_ms_ += t.ElapsedMs();
  return {AsyncWeights(), 0, t.ElapsedMs(), false};
}

void ParameterStore::MaybeFinalize() {
  if (contributors_ == 0) return;
  if (static_cast<int>(workers_.size()) < opt_.workers) {
    const auto waited = std::chrono::duration<double>(Clock::now() - first_register_).count();
    if (waited < opt_.worker_timeout_s) return;  // the others may still be starting
    spdlog::warn("only {} of {} workers registered after {:.1f} s: step {} goes on without them",
                 workers_.size(), opt_.workers, waited, step_);
  }
  for (const auto& [name, ws] : workers_)
    if (ws.live && !pushed_.count(name)) return;
  Timer t;
  // Mean of the pushes received; exchange=weights then steps the optimizer on it.
  const float inv = 1.f / static_cast<float>(contributors_);
  SgdOptions sgd = opt_.sgd;
  if (open_step_lr_) sgd.lr = *open_step_lr_;
  pool_.ParallelFor(static_cast<int64_t>(keys_.size()), [&](int64_t i) {
    KeyState& k = *keys_[i];
    for (float& a : k.accum) a *= inv;
    if (opt_.exchange_weights) {
      SgdStep(sgd, k.weights.data(), k.accum.data(), k.numel, &k.sgd);
    }
  });
  std::shared_ptr<StepResult> result = Encode(step_, opt_.exchange_weights, false);
  for (auto& k : keys_) std::fill(k->accum.begin(), k->accum.end(), 0.f);
  result->contributors = contributors_;
  result->server_ms = t.ElapsedMs() + open_step_apply_ms_ / contributors_;
  results_.push_back(result);
  while (results_.size() > 1) results_.pop_front();  // the newest only: the barrier orders steps
  total_server_ms_ += result->server_ms;
  ++step_;
  ++stats_.steps;
  pushed_.clear();
  contributors_ = 0;
  open_step_apply_ms_ = 0;
  open_step_lr_.reset();
  step_cv_.notify_all();
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

std::shared_ptr<const StepResult> ParameterStore::AsyncWeights() {
  if (!weights_result_ || weights_result_->step != step_)
    weights_result_ = Encode(step_, true, false);
  return weights_result_;
}

std::shared_ptr<StepResult> ParameterStore::Encode(int64_t step, bool weights, bool lossless) {
  auto r = std::make_shared<StepResult>();
  r->step = step;
  r->payloads.resize(keys_.size());
  pool_.ParallelFor(static_cast<int64_t>(keys_.size()), [&](int64_t i) {
    KeyState& k = *keys_[i];
    KeyPayload& out = r->payloads[i];
    out.key = model_[i].key;
    out.payload.shape = model_[i].shape;
    out.payload.dtype = model_[i].dtype;
    const float* src = weights ? k.weights.data() : k.accum.data();
    if (lossless) {
      out.payload.codec = "none";
      out.payload.bytes.assign(reinterpret_cast<const char*>(src), k.numel * sizeof(float));
    } else {
      out.payload.codec = k.pull->Name();
      k.pull->EncodeTo(src, k.numel, {model_[i].key, step}, &out.payload.bytes);
    }
  });
  return r;
}

std::shared_ptr<const StepResult> ParameterStore::Pull(const WorkerId& w, int64_t step,
                                                       Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  CheckWorker(w);
  GP_ENFORCE_AS(FailedPrecondition, initialized_, "the server has no weights yet");
  if (opt_.async) return AsyncWeights();
  if (step < 0) {
    GP_ENFORCE_AS(FailedPrecondition, !results_.empty(), "no step has completed yet");
    return results_.back();
  }
  step_cv_.wait_until(lock, deadline, [&] { return shutdown_ || step_ > step; });
  GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
  GP_ENFORCE_AS(Unavailable, step_ > step, "timed out waiting for step ", step, "; retry");
  auto r = FindResult(step);
  GP_ENFORCE_AS(FailedPrecondition, r != nullptr, "result of step ", step,
                " is no longer kept (server step ", step_, ")");
  return r;
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
  MaybeFinalize();  // a drop, or the registration grace ending, may complete the open step
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
     << "\n# TYPE gradpress_rejected_total counter\n";
  for (const auto& [reason, n] : rejected)
    os << "gradpress_rejected_total{reason=\"" << reason << "\"} " << n << "\n";
  return os.str();
}

}  // namespace gradpress::server
