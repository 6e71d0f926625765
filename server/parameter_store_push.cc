// ParameterStore: streamed pushes (BeginPush, PushSession) -- the per-piece checks as a push
// arrives and its decode at Commit. Where it lands (the accumulator, a staging buffer, or added
// from its sparse indices and values) is in parameter_store_landing.cc; the step flow around
// it in parameter_store_steps.cc.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/shape.h"
#include "common/timer.h"
#include "server/push_session.h"

namespace gradpress::server {

ParameterStore::PushSession::PushSession(std::unique_ptr<State> s) : s_(std::move(s)) {}

ParameterStore::PushSession::~PushSession() {
  State& st = *s_;
  ParameterStore& store = *st.store;
  std::lock_guard<std::mutex> lock(store.mu_);
  if (st.in_flight) st.lane->in_flight.erase(st.w.name);
  store.ReleaseTarget(st);
  if (st.in_call) store.members_.Leave(st.w.name);
}

std::unique_ptr<ParameterStore::PushSession> ParameterStore::BeginPush(
    const WorkerId& w, int64_t step, int64_t base_step, Clock::time_point deadline,
    std::optional<double> lr, int bucket) {
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
  members_.Enter(w.name);
  st.in_call = true;
  GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
  try {
    Member& ws = CheckWorker(w);
    GP_REFUSE(FailedPrecondition, Reason::kNotInitialized, model_.initialized,
              "the server has no initial weights yet");
    Lane& lane = agg_.Of(bucket, w);
    st.lane = &lane;
    if (opt_.async) {
      if (step <= ws.async_step) {
        ++stats_.duplicates;
        st.duplicate = st.has_early = true;
        st.early = {model_.AsyncWeights(step_), 0, 0, /*duplicate=*/true};
        return session;
      }
      GP_REFUSE(FailedPrecondition, Reason::kStalePush, step_ - base_step <= opt_.max_staleness,
                "worker '", w.name, "': push computed on step ", base_step, " is ",
                step_ - base_step, " steps stale (max_staleness ", opt_.max_staleness, ")");
    } else if (step < lane.step || lane.pushed.count(w.name) || lane.in_flight.count(w.name)) {
      // Duplicate of a push already applied (or being applied): acknowledged at Commit,
      // which waits for the step's result; never applied twice. A worker that rejoined while
      // the others completed this bucket of the open step gets the bucket's result too.
      const bool late = step == step_ && step < lane.step;
      GP_REFUSE(FailedPrecondition, Reason::kLatePush,
                late || step <= lane.LastStep(w.name) || lane.in_flight.count(w.name), "worker '",
                w.name, "': push for step ", step,
                " arrived after the step completed (server step ", step_, ")");
      st.duplicate = true;
      return session;
    } else {
      GP_REFUSE(FailedPrecondition, Reason::kAheadOfServer, step == lane.step && step == step_,
                "worker '", w.name, "': push for step ", step,
                " is ahead of the server's open step ", step_);
    }
  } catch (const FailedPrecondition&) {
    ++stats_.rejected["stale_or_out_of_order"];
    throw;
  } catch (const NotFound&) {
    ++stats_.rejected["unknown_worker"];
    throw;
  }
  st.lane->in_flight.insert(w.name);
  st.in_flight = true;
  st.keys.resize(st.lane->keys());
  // The step's first push lands straight in the accumulator. A later one takes a staging
  // buffer only once a dense key needs it (EnsureTarget): its sparse keys need none.
  if (!TryOwn(st) && opt_.async) AcquireTarget(st, lock);
  return session;
}

void ParameterStore::PushSession::Add(const Piece& piece, std::string_view bytes) {
  State& st = *s_;
  if (st.duplicate) return;
  Timer t;
  ParameterStore& S = *st.store;
  size_t i = st.last;
  if (i >= S.model_.size() || S.model_.spec(i).key != piece.key) {
    const int64_t at = S.model_.Index(std::string(piece.key));
    if (at < 0) {
      S.Reject("bad_key_or_shape");
      throw InvalidArgument("unknown key '" + std::string(piece.key) + "'", Reason::kBadKeyOrShape);
    }
    i = st.last = static_cast<size_t>(at);
  }
  if (i < st.lane->begin || i >= st.lane->end) {
    S.Reject("bad_key_or_shape");
    throw InvalidArgument(
        "key '" + std::string(piece.key) + "' is not in bucket " + std::to_string(st.lane->index),
        Reason::kBadKeyOrShape);
  }
  const size_t j = i - st.lane->begin;  // the key within the lane
  State::KeyIn& k = st.keys[j];
  const std::string& key = S.model_.spec(i).key;
  const int64_t numel = S.model_.key(i).numel;
  auto bad = [&](Reason reason, const std::string& what) {
    S.Reject(ReasonName(reason));
    throw InvalidArgument("key '" + key + "': " + what, reason);
  };
  if (!k.started) {
    if (piece.shape != S.model_.spec(i).shape) {
      bad(Reason::kBadKeyOrShape, "shape " + ShapeToString(piece.shape) +
                                      " does not match the model's " +
                                      ShapeToString(S.model_.spec(i).shape));
    }
    if (piece.offset != 0)
      bad(Reason::kUndecodable, "first chunk at offset " + std::to_string(piece.offset));
    if (piece.dtype > 3)
      bad(Reason::kUndecodable, "unknown dtype code " + std::to_string(piece.dtype));
    if (piece.total_bytes > 8 * static_cast<uint64_t>(numel) + 4096) {
      bad(Reason::kUndecodable, "payload of " + std::to_string(piece.total_bytes) +
                                    " bytes is larger than any codec produces");
    }
    k.codec = piece.codec;
    k.shape = piece.shape;
    k.total = piece.total_bytes;
    try {
      const compressors::Compressor& d = S.model_.Decoder(k.codec);
      k.raw = d.IsLossless();  // the floats themselves: streamed
      k.sparse = !S.opt_.async && d.IsSparse();
    } catch (const Error& e) {
      bad(Reason::kUndecodable, std::string("payload does not decode: ") + e.message());
    }
    if (k.raw && k.total != static_cast<uint64_t>(numel) * sizeof(float)) {
      bad(Reason::kUndecodable, "payload does not decode: " + k.codec + ": " +
                                    std::to_string(k.total) + " bytes, expected " +
                                    std::to_string(numel * sizeof(float)));
    }
    if (!k.raw) k.bytes.reserve(k.total);
    k.started = true;
  } else if (piece.codec != k.codec || piece.shape != k.shape || piece.total_bytes != k.total) {
    bad(Reason::kUndecodable, "chunk disagrees with the key's first chunk");
  }
  if (piece.offset != k.got) {
    bad(Reason::kUndecodable,
        "chunk at offset " + std::to_string(piece.offset) + ", expected " + std::to_string(k.got));
  }
  if (bytes.size() > k.total - k.got) {
    bad(Reason::kUndecodable, "chunks exceed total_bytes " + std::to_string(k.total));
  }
  if (k.raw) {
    if (st.dst.empty()) {  // a wait for a free buffer, not work: kept out of apply_ms
      Timer waited;
      S.EnsureTarget(st);
      st.apply_ms -= waited.ElapsedMs();
    }
    // Copied in blocks, each checked while still in cache. A float may straddle pieces:
    // floats are checked once all their bytes are in.
    char* out = reinterpret_cast<char*>(st.dst[j]);
    int64_t checked = static_cast<int64_t>(k.got / sizeof(float));
    for (size_t done = 0; done < bytes.size();) {
      const size_t n = std::min<size_t>(bytes.size() - done, 64 << 10);
      std::memcpy(out + k.got + done, bytes.data() + done, n);
      done += n;
      const int64_t upto = static_cast<int64_t>((k.got + done) / sizeof(float));
      const int64_t at = ModelState::FirstNonFinite(st.dst[j] + checked, upto - checked);
      if (at >= 0) {
        bad(Reason::kNonFinite,
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
    const Lane& lane = *st.lane;
    S.step_cv_.wait_until(lock, st.deadline, [&] { return S.shutdown_ || lane.step > st.step; });
    GP_REFUSE(Unavailable, Reason::kShuttingDown, !S.shutdown_, "server is shutting down");
    GP_REFUSE(Unavailable, Reason::kTimedOut, lane.step > st.step, "timed out waiting for step ",
              st.step, " to complete; retry");
    auto r = lane.Find(st.step);
    GP_REFUSE(FailedPrecondition, Reason::kResultDropped, r != nullptr, "result of step ", st.step,
              " is no longer kept (server step ", S.step_, ")");
    return {r, waited.ElapsedMs(), 0, /*duplicate=*/true};
  }
  Timer t;
  const size_t first = st.lane->begin;
  std::vector<size_t> coded;  // keys to decode, within the lane
  for (size_t j = 0; j < st.keys.size(); ++j) {
    const State::KeyIn& k = st.keys[j];
    const std::string& key = S.model_.spec(first + j).key;
    if (!k.started) {
      S.Reject("bad_key_or_shape");
      throw InvalidArgument("push is missing key '" + key + "'", Reason::kBadKeyOrShape);
    }
    if (k.got != k.total) {
      S.Reject("undecodable");
      throw InvalidArgument("key '" + key + "': got " + std::to_string(k.got) + " of " +
                                std::to_string(k.total) + " payload bytes",
                            Reason::kUndecodable);
    }
    if (!k.raw) coded.push_back(j);
  }
  bool dense_coded = false;
  for (size_t i : coded) dense_coded |= !st.keys[i].sparse;
  if (dense_coded && st.dst.empty()) {  // as in Add: the wait is not apply time
    Timer waited;
    S.EnsureTarget(st);
    st.apply_ms -= waited.ElapsedMs();
  }
  std::vector<std::string> errors(coded.size());
  std::vector<char> non_finite(coded.size(), 0);
  S.pool_.ParallelFor(static_cast<int64_t>(coded.size()), [&](int64_t j) {
    const size_t i = coded[j];
    State::KeyIn& k = st.keys[i];
    const std::string& key = S.model_.spec(first + i).key;
    KeyState& ks = S.model_.key(first + i);
    const int64_t numel = ks.numel;
    int64_t at = -1;
    try {
      const compressors::Compressor& d = S.model_.Decoder(k.codec);
      if (k.sparse) {
        d.DecodeSparse(k.bytes, numel, &k.idx, &k.val);
        // The dense decode is finite where nothing was kept: the values are all to check.
        at = ModelState::FirstNonFinite(k.val.data(), static_cast<int64_t>(k.val.size()));
        if (at >= 0) at = k.idx[at];
      } else {
        d.DecodeTo(k.bytes, numel, st.dst[i]);
        at = ModelState::FirstNonFinite(st.dst[i], numel);
      }
    } catch (const Error& e) {
      errors[j] = "key '" + key + "': payload does not decode: " + e.message();
      return;
    }
    if (at >= 0) {
      non_finite[j] = 1;
      errors[j] =
          "key '" + key + "': decoded gradient has NaN or Inf at element " + std::to_string(at);
    } else if (k.sparse && st.owner) {  // the accumulator is this push's alone
      AssignSparse(k.idx, k.val, numel, st.dst[i], &ks.zeros);
    }
  });
  for (size_t j = 0; j < errors.size(); ++j) {
    if (errors[j].empty()) continue;
    S.Reject(non_finite[j] ? "non_finite" : "undecodable");
    throw InvalidArgument(errors[j], non_finite[j] ? Reason::kNonFinite : Reason::kUndecodable);
  }
  for (size_t i : coded) std::string().swap(st.keys[i].bytes);
  st.apply_ms += t.ElapsedMs();
  if (S.opt_.async) {
    st.in_flight = false;  // AsyncPush takes it out of the lane's in_flight
    PushPullResult r = S.AsyncPush(st.w, st.step, st.base_step, st.dst, st.bytes, st.lr);
    r.apply_ms = st.apply_ms;
    return r;
  }
  return S.CommitSync(st, wait);
}

PushPullResult ParameterStore::PushPull(const WorkerId& w, int64_t step, int64_t base_step,
                                        std::vector<KeyPayload> pushes, Clock::time_point deadline,
                                        bool wait, std::optional<double> lr, int bucket) {
  auto session = BeginPush(w, step, base_step, deadline, lr, bucket);
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
