// ParameterStore: streamed pushes (BeginPush, PushSession) -- the per-piece checks as a push
// arrives and its decode at Commit, both server/payload_check.h's (the weights' checks too).
// Where it lands (the accumulator, a staging buffer, or added from its sparse indices and
// values) is in parameter_store_landing.cc; the step flow around it in
// parameter_store_steps.cc.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/shape.h"
#include "common/timer.h"
#include "server/parameter_store.h"
#include "server/push_session.h"

namespace gradpress::server {

ParameterStore::PushSession::PushSession(std::unique_ptr<State> s) : s_(std::move(s)) {}

ParameterStore::PushSession::~PushSession() {
  State& st = *s_;
  StoreState& store = *st.store;
  std::lock_guard<std::mutex> lock(store.mu_);
  if (st.in_flight) st.lane->in_flight.erase(st.w.name);
  store.ReleaseTarget(st);
  if (st.in_call) store.members_.Leave(st.w.name);
}

std::unique_ptr<ParameterStore::PushSession> ParameterStore::BeginPush(
    const WorkerId& w, int64_t step, int64_t base_step, Clock::time_point deadline,
    std::optional<double> lr, int bucket, std::vector<double> key_lr) {
  GP_ENFORCE(!lr || (std::isfinite(*lr) && *lr >= 0), "worker '", w.name, "': learning rate ",
             lr.value_or(0), " is not a finite number >= 0");
  for (size_t i = 0; i < key_lr.size(); ++i)
    GP_REFUSE(InvalidArgument, Reason::kBadRequest, std::isfinite(key_lr[i]) && key_lr[i] >= 0,
              "worker '", w.name, "': the learning rate of the push's key ", i, ", ", key_lr[i],
              ", is not a finite number >= 0");
  auto state = std::make_unique<PushState>();
  state->store = this;
  state->w = w;
  state->step = step;
  state->base_step = base_step;
  state->deadline = deadline;
  state->lr = lr;
  state->key_lr = std::move(key_lr);
  PushState& st = *state;
  std::unique_ptr<PushSession> session(new PushSession(std::move(state)));  // before the lock:
  std::unique_lock<std::mutex> lock(mu_);  // its destructor takes mu_
  members_.Enter(w.name);
  st.in_call = true;
  GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
  try {
    Member* member = nullptr;
    Lane* open = nullptr;
    for (;;) {
      member = &CheckWorker(w);
      GP_REFUSE(FailedPrecondition, Reason::kNotInitialized, model_.initialized,
                "the server has no initial weights yet");
      open = &agg_.Of(bucket, w);
      if (!open->finalizing) break;  // a lane being finalized takes no push: its keys are busy
      GP_REFUSE(Unavailable, Reason::kTimedOut, Clock::now() < deadline,
                "timed out waiting for bucket ", open->index, " of step ", open->step,
                " to be finalized; retry");
      step_cv_.wait_until(lock, deadline);
      GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
    }
    Member& ws = *member;
    Lane& lane = *open;
    st.lane = &lane;
    GP_REFUSE(InvalidArgument, Reason::kBadRequest,
              st.key_lr.empty() || st.key_lr.size() == lane.keys(), "worker '", w.name,
              "': the push names ", st.key_lr.size(), " per-key learning rates for bucket ",
              lane.index, "'s ", lane.keys(), " keys");
    if (opt_.async) {
      if (step <= ws.async_step) {
        ++stats_.duplicates;
        st.duplicate = st.has_early = true;
        st.early = {AsyncResult(&lock), 0, 0, /*duplicate=*/true};
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
  StoreState& S = *st.store;
  const PayloadCheck check(&S.model_, /*sparse=*/!S.opt_.async);
  try {
    size_t i = st.last;
    if (i >= S.model_.size() || S.model_.spec(i).key != piece.key)
      i = st.last = check.Index(piece.key);
    if (i < st.lane->begin || i >= st.lane->end) {
      throw InvalidArgument(
          "key '" + std::string(piece.key) + "' is not in bucket " + std::to_string(st.lane->index),
          Reason::kBadKeyOrShape);
    }
    const size_t j = i - st.lane->begin;  // the key within the lane
    PayloadIn& k = st.keys[j];
    const bool first = !k.started;
    check.Piece(i, piece, bytes.size(), &k);
    if (first && !k.raw) k.bytes.reserve(k.total);
    if (k.raw) {
      if (st.dst.empty()) {  // a wait for a free buffer, not work: kept out of apply_ms
        Timer waited;
        S.EnsureTarget(st);
        st.apply_ms -= waited.ElapsedMs();
      }
      check.Raw(i, k.got, bytes, st.dst[j]);
    } else {
      k.bytes.append(bytes);
    }
    k.got += bytes.size();
  } catch (const InvalidArgument& e) {
    S.Reject(ReasonName(e.reason()));
    throw;
  }
  st.bytes += bytes.size();
  st.apply_ms += t.ElapsedMs();
}

PushPullResult ParameterStore::PushSession::Commit(bool wait) {
  State& st = *s_;
  StoreState& S = *st.store;
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
  const PayloadCheck check(&S.model_, /*sparse=*/!S.opt_.async);
  std::vector<size_t> coded;  // keys to decode, within the lane
  try {
    for (size_t j = 0; j < st.keys.size(); ++j) {
      check.Complete(first + j, st.keys[j]);
      if (!st.keys[j].raw) coded.push_back(j);
    }
    bool dense_coded = false;
    for (size_t i : coded) dense_coded |= !st.keys[i].sparse;
    if (dense_coded && st.dst.empty()) {  // as in Add: the wait is not apply time
      Timer waited;
      S.EnsureTarget(st);
      st.apply_ms -= waited.ElapsedMs();
    }
    ForEachChecked(&S.pool_, static_cast<int64_t>(coded.size()), [&](int64_t c) {
      const size_t j = coded[c];
      PayloadIn& k = st.keys[j];
      check.Decode(first + j, k.bytes, &k, k.sparse ? nullptr : st.dst[j]);
      KeyState& ks = S.model_.key(first + j);
      if (k.sparse && st.owner)  // the accumulator is this push's alone
        AssignSparse(k.idx, k.val, ks.numel, st.dst[j], &ks.zeros);
    });
  } catch (const InvalidArgument& e) {
    S.Reject(ReasonName(e.reason()));
    throw;
  }
  for (size_t i : coded) std::string().swap(st.keys[i].bytes);
  st.apply_ms += t.ElapsedMs();
  if (S.opt_.async) {
    st.in_flight = false;  // AsyncPush takes it out of the lane's in_flight
    PushPullResult r = S.AsyncPush(st);
    r.apply_ms = st.apply_ms;
    return r;
  }
  return S.CommitSync(st, wait);
}

PushPullResult ParameterStore::PushPull(const WorkerId& w, int64_t step, int64_t base_step,
                                        std::vector<KeyPayload> pushes, Clock::time_point deadline,
                                        bool wait, std::optional<double> lr, int bucket,
                                        std::vector<double> key_lr) {
  auto session = BeginPush(w, step, base_step, deadline, lr, bucket, std::move(key_lr));
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
