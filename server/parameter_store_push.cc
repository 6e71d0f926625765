// ParameterStore, part four: streamed pushes (BeginPush, PushSession) -- where a push lands
// while it streams in (the accumulator or a staging buffer), the per-piece checks, and the
// commit that makes it count. The step flow around it is in parameter_store_steps.cc.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/tensor_bytes.h"
#include "common/timer.h"
#include "server/parameter_store.h"

namespace gradpress::server {

struct ParameterStore::PushSession::State {
  ParameterStore* store = nullptr;
  WorkerId w;
  int64_t step = 0, base_step = 0;
  Clock::time_point deadline;
  std::optional<double> lr;  // exchange=weights: the SGD step's learning rate
  bool in_call = false;      // counted in in_call_ (a worker inside a call is alive)
  bool in_flight = false;    // in in_flight_
  bool duplicate = false;    // acknowledged, its pieces ignored
  bool has_early = false;    // async duplicate: `early` is the answer
  PushPullResult early;
  bool committed = false;
  bool owner = false;               // writes straight into the accumulator
  std::unique_ptr<Buffer> staging;  // or into this
  std::vector<float*> dst;          // per key: where its floats go
  struct KeyIn {
    bool started = false, raw = false;  // raw: "none", copied into dst as it arrives
    std::string codec;
    std::vector<int64_t> shape;
    uint64_t total = 0, got = 0;
    std::string bytes;  // other codecs: collected, decoded at Commit
  };
  std::vector<KeyIn> keys;
  size_t last = 0;  // key of the previous piece
  uint64_t bytes = 0;
  double apply_ms = 0;
};

ParameterStore::PushSession::PushSession(std::unique_ptr<State> s) : s_(std::move(s)) {}

ParameterStore::PushSession::~PushSession() {
  State& st = *s_;
  ParameterStore& store = *st.store;
  std::lock_guard<std::mutex> lock(store.mu_);
  if (st.in_flight) store.in_flight_.erase(st.w.name);
  store.ReleaseTarget(st);
  if (st.in_call) {
    if (--store.in_call_[st.w.name] == 0) store.in_call_.erase(st.w.name);
    auto it = store.workers_.find(st.w.name);
    if (it != store.workers_.end()) it->second.last_seen = Clock::now();
  }
}

std::unique_ptr<ParameterStore::PushSession> ParameterStore::BeginPush(const WorkerId& w,
                                                                       int64_t step,
                                                                       int64_t base_step,
                                                                       Clock::time_point deadline,
                                                                       std::optional<double> lr) {
  GP_ENFORCE(!lr || (std::isfinite(*lr) && *lr >= 0), "worker '", w.name, "': learning rate ",
             lr.value_or(0), " is not a finite number >= 0");
  auto state = std::make_unique<PushSession::State>();
  state->store = this;
  state->w = w;
  state->step = step;
  state->base_step = base_step;
  state->deadline = deadline;
  state->lr = lr;
  PushSession::State& st = *state;
  std::unique_ptr<PushSession> session(new PushSession(std::move(state)));  // before the lock:
  std::unique_lock<std::mutex> lock(mu_);  // its destructor takes mu_
  ++in_call_[w.name];
  st.in_call = true;
  GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
  try {
    WorkerState& ws = CheckWorker(w);
    GP_ENFORCE_AS(FailedPrecondition, initialized_, "the server has no initial weights yet");
    if (opt_.async) {
      if (step <= ws.last_step) {
        ++stats_.duplicates;
        st.duplicate = st.has_early = true;
        st.early = {AsyncWeights(), 0, 0, /*duplicate=*/true};
        return session;
      }
      GP_ENFORCE_AS(FailedPrecondition, step_ - base_step <= opt_.max_staleness, "worker '", w.name,
                    "': push computed on step ", base_step, " is ", step_ - base_step,
                    " steps stale (max_staleness ", opt_.max_staleness, ")");
    } else if (step < step_ || pushed_.count(w.name) || in_flight_.count(w.name)) {
      // Duplicate of a push already applied (or being applied): acknowledged at Commit,
      // which waits for the step's result; never applied twice.
      GP_ENFORCE_AS(FailedPrecondition, step <= ws.last_step || in_flight_.count(w.name),
                    "worker '", w.name, "': push for step ", step,
                    " arrived after the step completed (server step ", step_, ")");
      st.duplicate = true;
      return session;
    } else {
      GP_ENFORCE_AS(FailedPrecondition, step == step_, "worker '", w.name, "': push for step ",
                    step, " is ahead of the server's open step ", step_);
    }
  } catch (const FailedPrecondition&) {
    ++stats_.rejected["stale_or_out_of_order"];
    throw;
  } catch (const NotFound&) {
    ++stats_.rejected["unknown_worker"];
    throw;
  }
  in_flight_.insert(w.name);
  st.in_flight = true;
  st.keys.resize(keys_.size());
  AcquireTarget(st, lock);
  return session;
}

void ParameterStore::AcquireTarget(PushSession::State& st, std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (!opt_.async && !accum_owned_ && accum_holders_ == 0) {  // the step's first push
      accum_owned_ = true;
      accum_holders_ = 1;
      st.owner = true;
      for (auto& k : keys_) st.dst.push_back(k->accum.data());
      return;
    }
    if (!staging_free_.empty() || staging_count_ < kMaxStaging) break;
    step_cv_.wait_until(lock, st.deadline);
    GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
    GP_ENFORCE_AS(Unavailable, Clock::now() < st.deadline,
                  "no staging buffer came free before the deadline (server busy); retry");
  }
  if (staging_free_.empty()) {
    auto b = std::make_unique<Buffer>(keys_.size());
    for (size_t i = 0; i < keys_.size(); ++i) (*b)[i].assign(keys_[i]->numel, 0.f);
    ++staging_count_;
    staging_free_.push_back(std::move(b));
  }
  st.staging = std::move(staging_free_.back());
  staging_free_.pop_back();
  for (auto& v : *st.staging) st.dst.push_back(v.data());
}

void ParameterStore::ReleaseTarget(PushSession::State& st) {
  if (st.owner) {  // committed: its floats stay, counted in accum_holders_; else gone
    accum_owned_ = false;
    if (!st.committed) --accum_holders_;
    st.owner = false;
  }
  if (st.staging) staging_free_.push_back(std::move(st.staging));
  st.dst.clear();
  step_cv_.notify_all();
}

void ParameterStore::PushSession::Add(const Piece& piece, std::string_view bytes) {
  State& st = *s_;
  if (st.duplicate) return;
  Timer t;
  ParameterStore& S = *st.store;
  size_t i = st.last;
  if (i >= S.model_.size() || S.model_[i].key != piece.key) {
    auto it = S.key_index_.find(std::string(piece.key));
    if (it == S.key_index_.end()) {
      S.Reject("bad_key_or_shape");
      throw InvalidArgument("unknown key '" + std::string(piece.key) + "'");
    }
    i = st.last = it->second;
  }
  State::KeyIn& k = st.keys[i];
  const std::string& key = S.model_[i].key;
  const int64_t numel = S.keys_[i]->numel;
  auto bad = [&](const char* reason, const std::string& what) {
    S.Reject(reason);
    throw InvalidArgument("key '" + key + "': " + what);
  };
  if (!k.started) {
    if (piece.shape != S.model_[i].shape) {
      bad("bad_key_or_shape", "shape " + ShapeToString(piece.shape) +
                                  " does not match the model's " +
                                  ShapeToString(S.model_[i].shape));
    }
    if (piece.offset != 0)
      bad("undecodable", "first chunk at offset " + std::to_string(piece.offset));
    if (piece.dtype > 3) bad("undecodable", "unknown dtype code " + std::to_string(piece.dtype));
    if (piece.total_bytes > 8 * static_cast<uint64_t>(numel) + 4096) {
      bad("undecodable", "payload of " + std::to_string(piece.total_bytes) +
                             " bytes is larger than any codec produces");
    }
    k.codec = piece.codec;
    k.shape = piece.shape;
    k.total = piece.total_bytes;
    k.raw = k.codec == "none";
    if (k.raw && k.total != static_cast<uint64_t>(numel) * sizeof(float)) {
      bad("undecodable", "payload does not decode: none: " + std::to_string(k.total) +
                             " bytes, expected " + std::to_string(numel * sizeof(float)));
    }
    if (!k.raw) {
      try {
        S.Decoder(k.codec);
      } catch (const Error& e) {
        bad("undecodable", std::string("payload does not decode: ") + e.what());
      }
      k.bytes.reserve(k.total);
    }
    k.started = true;
  } else if (piece.codec != k.codec || piece.shape != k.shape || piece.total_bytes != k.total) {
    bad("undecodable", "chunk disagrees with the key's first chunk");
  }
  if (piece.offset != k.got) {
    bad("undecodable",
        "chunk at offset " + std::to_string(piece.offset) + ", expected " + std::to_string(k.got));
  }
  if (bytes.size() > k.total - k.got) {
    bad("undecodable", "chunks exceed total_bytes " + std::to_string(k.total));
  }
  if (k.raw) {
    // Copied in blocks, each checked while still in cache. A float may straddle pieces:
    // floats are checked once all their bytes are in.
    char* out = reinterpret_cast<char*>(st.dst[i]);
    int64_t checked = static_cast<int64_t>(k.got / sizeof(float));
    for (size_t done = 0; done < bytes.size();) {
      const size_t n = std::min<size_t>(bytes.size() - done, 64 << 10);
      std::memcpy(out + k.got + done, bytes.data() + done, n);
      done += n;
      const int64_t upto = static_cast<int64_t>((k.got + done) / sizeof(float));
      const int64_t at = FirstNonFinite(st.dst[i] + checked, upto - checked);
      if (at >= 0) {
        bad("non_finite",
            "decoded gradient has NaN or Inf at element " + std::to_string(checked + at));
      }
      checked = upto;
    }
  } else {
    k.bytes.append(bytes);
  }
  k.got += bytes.size();
  st.bytes += bytes.size();
  st.apply_ms += t.ElapsedMs();
}

PushPullResult ParameterStore::PushSession::Commit(bool wait) {
  State& st = *s_;
  ParameterStore& S = *st.store;
  if (st.has_early) return st.early;
  if (st.duplicate) {
    std::unique_lock<std::mutex> lock(S.mu_);
    ++S.stats_.duplicates;
    if (!wait) return {nullptr, 0, 0, /*duplicate=*/true};  // Push: the ack is all it needs
    Timer waited;
    S.step_cv_.wait_until(lock, st.deadline, [&] { return S.shutdown_ || S.step_ > st.step; });
    GP_ENFORCE_AS(Unavailable, !S.shutdown_, "server is shutting down");
    GP_ENFORCE_AS(Unavailable, S.step_ > st.step, "timed out waiting for step ", st.step,
                  " to complete; retry");
    auto r = S.FindResult(st.step);
    GP_ENFORCE_AS(FailedPrecondition, r != nullptr, "result of step ", st.step,
                  " is no longer kept (server step ", S.step_, ")");
    return {r, waited.ElapsedMs(), 0, /*duplicate=*/true};
  }
  Timer t;
  std::vector<size_t> coded;  // keys to decode
  for (size_t i = 0; i < st.keys.size(); ++i) {
    const State::KeyIn& k = st.keys[i];
    if (!k.started) {
      S.Reject("bad_key_or_shape");
      throw InvalidArgument("push is missing key '" + S.model_[i].key + "'");
    }
    if (k.got != k.total) {
      S.Reject("undecodable");
      throw InvalidArgument("key '" + S.model_[i].key + "': got " + std::to_string(k.got) + " of " +
                            std::to_string(k.total) + " payload bytes");
    }
    if (!k.raw) coded.push_back(i);
  }
  std::vector<std::string> errors(coded.size());
  std::vector<char> non_finite(coded.size(), 0);
  S.pool_.ParallelFor(static_cast<int64_t>(coded.size()), [&](int64_t j) {
    const size_t i = coded[j];
    const std::string& key = S.model_[i].key;
    const int64_t numel = S.keys_[i]->numel;
    try {
      S.Decoder(st.keys[i].codec).DecodeTo(st.keys[i].bytes, numel, st.dst[i]);
    } catch (const Error& e) {
      errors[j] = "key '" + key + "': payload does not decode: " + e.what();
      return;
    }
    const int64_t at = FirstNonFinite(st.dst[i], numel);
    if (at >= 0) {
      non_finite[j] = 1;
      errors[j] =
          "key '" + key + "': decoded gradient has NaN or Inf at element " + std::to_string(at);
    }
  });
  for (size_t j = 0; j < errors.size(); ++j) {
    if (errors[j].empty()) continue;
    S.Reject(non_finite[j] ? "non_finite" : "undecodable");
    throw InvalidArgument(errors[j]);
  }
  for (size_t i : coded) std::string().swap(st.keys[i].bytes);
  st.apply_ms += t.ElapsedMs();
  if (S.opt_.async) {
    st.in_flight = false;  // AsyncPush takes it out of in_flight_
    PushPullResult r = S.AsyncPush(st.w, st.step, st.base_step, st.dst, st.bytes, st.lr);
    r.apply_ms = st.apply_ms;
    return r;
  }
  return S.CommitSync(st, wait);
}

PushPullResult ParameterStore::CommitSync(PushSession::State& st, bool wait) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!st.owner) {
    // The step's first push may still be streaming into the accumulator: land after it.
    step_cv_.wait_until(lock, st.deadline, [&] { return shutdown_ || !accum_owned_; });
    GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
    GP_ENFORCE_AS(Unavailable, !accum_owned_,
                  "timed out waiting for another push to land in the step; retry");
    Timer t;
    if (accum_holders_ == 0) {  // nothing in the accumulator: the staging buffer becomes it
      for (size_t i = 0; i < keys_.size(); ++i) keys_[i]->accum.swap((*st.staging)[i]);
      accum_holders_ = 1;
    } else {  // added outside mu_; the step cannot complete before this push is counted
      ++accum_holders_;
      lock.unlock();
      std::vector<std::pair<size_t, int64_t>> blocks;
      for (size_t i = 0; i < keys_.size(); ++i)
        for (int64_t b = 0; b < keys_[i]->numel; b += kBlock) blocks.push_back({i, b});
      pool_.ParallelFor(static_cast<int64_t>(blocks.size()), [&](int64_t j) {
        const auto [i, b] = blocks[j];
        KeyState& k = *keys_[i];
        std::lock_guard<std::mutex> block_lock(k.block_mu[b / kBlock]);
        float* acc = k.accum.data();
        const float* s = st.dst[i];
        for (int64_t e = b, end = std::min(k.numel, b + kBlock); e < end; ++e) acc[e] += s[e];
      });
      lock.lock();
    }
    st.apply_ms += t.ElapsedMs();
  }
  st.committed = true;
  in_flight_.erase(st.w.name);
  st.in_flight = false;
  ReleaseTarget(st);
  pushed_.insert(st.w.name);
  ++contributors_;
  stats_.bytes_in += st.bytes;
  open_step_apply_ms_ += st.apply_ms;
  if (st.lr) open_step_lr_ = st.lr;
  workers_.at(st.w.name).last_step = st.step;
  const int64_t step = st.step;
  MaybeFinalize();
  if (!wait) return {nullptr, 0, st.apply_ms, false};
  Timer waited;
  step_cv_.wait_until(lock, st.deadline, [&] { return shutdown_ || step_ > step; });
  GP_ENFORCE_AS(Unavailable, !shutdown_, "server is shutting down");
  GP_ENFORCE_AS(Unavailable, step_ > step, "timed out waiting for the other workers at step ", step,
                "; the push is kept: retry to wait again");
  return {FindResult(step), waited.ElapsedMs(), st.apply_ms, false};
}

PushPullResult ParameterStore::PushPull(const WorkerId& w, int64_t step, int64_t base_step,
                                        std::vector<KeyPayload> pushes, Clock::time_point deadline,
                                        bool wait, std::optional<double> lr) {
  auto session = BeginPush(w, step, base_step, deadline, lr);
  for (const auto& kp : pushes) {
    Piece piece{kp.key,
                kp.payload.codec,
                kp.payload.shape,
                static_cast<uint32_t>(kp.payload.dtype),
                kp.payload.bytes.size(),
                0};
    session->Add(piece, kp.payload.bytes);
  }
  return session->Commit(wait);
}

}  // namespace gradpress::server
