// ParameterStore: where a streamed push lands and the commit that makes it count. The step's
// first push writes into the accumulator itself (TryOwn). A later push adds into it: a dense
// key from a reused staging buffer (kMaxStaging per lane, so memory does not grow with the
// workers), a sparse key straight from its decoded indices and values, in O(payload)
// (server/sparse_accum.h) -- at 1% density that is what keeps the server's CPU per step
// from growing with the model times the workers. The pieces' arrival is in
// parameter_store_push.cc.
#include <algorithm>
#include <utility>
#include <vector>

#include "common/error.h"
#include "common/timer.h"
#include "server/push_session.h"

namespace gradpress::server {
namespace {

constexpr size_t kSerialSparseAdd = size_t{1} << 16;  // kept elements of one push

}  // namespace

bool StoreState::TryOwn(PushState& st) {
  Lane& lane = *st.lane;
  if (opt_.async || lane.accum_owned || lane.accum_holders != 0) return false;
  lane.accum_owned = true;
  lane.accum_holders = 1;
  st.owner = true;
  for (size_t i = lane.begin; i < lane.end; ++i) st.dst.push_back(model_.key(i).accum.data());
  return true;
}

void StoreState::AcquireTarget(PushState& st, std::unique_lock<std::mutex>& lock) {
  Lane& lane = *st.lane;
  for (;;) {
    if (TryOwn(st)) return;  // the accumulator came free (its first push failed)
    if (!lane.staging_free.empty() || lane.staging_count < kMaxStaging) break;
    step_cv_.wait_until(lock, st.deadline);
    GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
    GP_REFUSE(Unavailable, Reason::kTimedOut, Clock::now() < st.deadline,
              "no staging buffer came free before the deadline (server busy); retry");
  }
  if (lane.staging_free.empty()) {
    auto b = std::make_unique<Buffer>(lane.keys());
    for (size_t i = lane.begin; i < lane.end; ++i)
      (*b)[i - lane.begin].assign(model_.key(i).numel, 0.f);
    ++lane.staging_count;
    lane.staging_free.push_back(std::move(b));
  }
  st.staging = std::move(lane.staging_free.back());
  lane.staging_free.pop_back();
  for (auto& v : *st.staging) st.dst.push_back(v.data());
}

void StoreState::EnsureTarget(PushState& st) {
  std::unique_lock<std::mutex> lock(mu_);
  if (st.dst.empty()) AcquireTarget(st, lock);
}

void StoreState::ReleaseTarget(PushState& st) {
  if (st.owner) {  // committed: its floats stay, counted in accum_holders; else gone
    st.lane->accum_owned = false;
    if (!st.committed) --st.lane->accum_holders;
    st.owner = false;
  }
  if (st.staging) st.lane->staging_free.push_back(std::move(st.staging));
  st.dst.clear();
  step_cv_.notify_all();
}

void StoreState::AddToAccumulator(PushState& st) {
  Lane& lane = *st.lane;
  // One add at a time per lane: the order of the float additions is the order of the
  // pushes, and each row's SignedZeros is updated by one add at a time.
  std::lock_guard<std::mutex> adding(lane.add_mu);
  std::vector<std::pair<size_t, int64_t>> blocks;  // dense keys: (key, first element)
  std::vector<size_t> sparse;                      // keys within the lane
  for (size_t i = lane.begin; i < lane.end; ++i) {
    if (st.keys[i - lane.begin].sparse) {
      sparse.push_back(i - lane.begin);
      continue;
    }
    model_.key(i).zeros.Unknown();
    for (int64_t b = 0; b < model_.key(i).numel; b += ModelState::kBlock) blocks.push_back({i, b});
  }
  pool_.ParallelFor(static_cast<int64_t>(blocks.size()), [&](int64_t j) {
    const auto [i, b] = blocks[j];
    KeyState& k = model_.key(i);
    std::lock_guard<std::mutex> block_lock(k.block_mu[b / ModelState::kBlock]);
    float* acc = k.accum.data();
    const float* s = st.dst[i - lane.begin];
    for (int64_t e = b, end = std::min(k.numel, b + ModelState::kBlock); e < end; ++e)
      acc[e] += s[e];
  });
  // Sparse keys: on this thread while the payload is small (waking the pool for a few
  // thousand adds costs more than the adds), else a key per pool thread.
  size_t kept = 0;
  for (size_t j : sparse) kept += st.keys[j].idx.size();
  auto add = [&](int64_t j) {
    const PayloadIn& in = st.keys[sparse[j]];
    KeyState& k = model_.key(lane.begin + sparse[j]);
    AddSparse(in.idx, in.val, k.numel, k.accum.data(), &k.zeros);
  };
  if (kept < kSerialSparseAdd) {
    for (size_t j = 0; j < sparse.size(); ++j) add(static_cast<int64_t>(j));
  } else {
    pool_.ParallelFor(static_cast<int64_t>(sparse.size()), add);
  }
}

PushPullResult StoreState::CommitSync(PushState& st, bool wait) {
  std::unique_lock<std::mutex> lock(mu_);
  Lane& lane = *st.lane;
  if (st.owner) {  // its raw and dense keys may hold -0.0 anywhere; its sparse ones are known
    for (size_t j = 0; j < lane.keys(); ++j)
      if (!st.keys[j].sparse) model_.key(lane.begin + j).zeros.Unknown();
  } else {
    // The step's first push may still be streaming into the accumulator: land after it.
    step_cv_.wait_until(lock, st.deadline, [&] { return shutdown_ || !lane.accum_owned; });
    GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
    GP_REFUSE(Unavailable, Reason::kTimedOut, !lane.accum_owned,
              "timed out waiting for another push to land in the step; retry");
    Timer t;
    if (lane.accum_holders == 0) {  // nothing in the accumulator (its first push failed):
      for (size_t i = lane.begin; i < lane.end; ++i) {  // this push becomes it
        KeyState& k = model_.key(i);
        const PayloadIn& in = st.keys[i - lane.begin];
        if (in.sparse) {
          AssignSparse(in.idx, in.val, k.numel, k.accum.data(), &k.zeros);
        } else {
          k.accum.swap((*st.staging)[i - lane.begin]);
          k.zeros.Unknown();
        }
      }
      lane.accum_holders = 1;
    } else {  // added outside mu_; the step cannot complete before this push is counted
      ++lane.accum_holders;
      lock.unlock();
      AddToAccumulator(st);
      lock.lock();
    }
    st.apply_ms += t.ElapsedMs();
  }
  st.committed = true;
  lane.in_flight.erase(st.w.name);
  st.in_flight = false;
  ReleaseTarget(st);
  lane.pushed.insert(st.w.name);
  ++lane.contributors;
  stats_.bytes_in += st.bytes;
  lane.apply_ms += st.apply_ms;
  if (st.lr) lane.lr = st.lr;
  if (!st.key_lr.empty()) lane.key_lr = std::move(st.key_lr);
  lane.last_step[st.w.name] = st.step;
  const int64_t step = st.step;
  MaybeFinalize(lane, &lock);
  if (!wait) return {nullptr, 0, st.apply_ms, false};
  Timer waited;
  step_cv_.wait_until(lock, st.deadline, [&] { return shutdown_ || lane.step > step; });
  GP_REFUSE(Unavailable, Reason::kShuttingDown, !shutdown_, "server is shutting down");
  GP_REFUSE(Unavailable, Reason::kTimedOut, lane.step > step,
            "timed out waiting for the other workers at step ", step,
            "; the push is kept: retry to wait again");
  return {lane.Find(step), waited.ElapsedMs(), st.apply_ms, false};
}

}  // namespace gradpress::server
