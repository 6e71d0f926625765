// ParameterStore: registration (the model's fingerprint, the bucket split, a restarted
// shard's catch-up) and the initial weights.
#include "server/parameter_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "common/error.h"
#include "common/shape.h"
#include "compressors/registry.h"

namespace gradpress::server {

namespace {

std::string ModelDiff(const TensorSpec& a, const TensorSpec& b) {
  std::ostringstream os;
  os << "key '" << b.key << "': shape " << ShapeToString(b.shape) << " "
     << compressors::DTypeName(b.dtype) << " vs the first model's '" << a.key << "' "
     << ShapeToString(a.shape) << " " << compressors::DTypeName(a.dtype);
  return os.str();
}

}  // namespace

uint64_t StepResult::PayloadBytes() const {
  uint64_t b = 0;
  for (const auto& p : payloads) b += p.payload.bytes.size();
  return b;
}

StoreState::StoreState(StoreOptions options)
    : opt_(std::move(options)),
      pool_(std::max(1, opt_.threads)),
      members_(opt_.workers, opt_.worker_timeout_s),
      model_(opt_, &pool_) {}

ParameterStore::ParameterStore(StoreOptions options) : StoreState(std::move(options)) {
  compressors::RegisterBuiltinCompressors();
  GP_ENFORCE(opt_.workers >= 1, "server needs at least one worker, got ", opt_.workers);
  GP_ENFORCE(!opt_.async || opt_.exchange_weights,
             "async mode applies each push to the server's weights: it needs exchange=weights");
  compressors::MakeCompressor(opt_.pull);  // validates the pull codec now, not at step 1
}

ParameterStore::~ParameterStore() { Shutdown(); }

void StoreState::SetModel(const std::vector<TensorSpec>& model, const std::string& config_hash) {
  model_.Set(model, config_hash);
  agg_.Split({}, model_.size(), step_);
}

int ParameterStore::buckets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(agg_.size());
}

RegisterResult ParameterStore::Register(const WorkerId& w, const std::vector<TensorSpec>& model,
                                        const std::string& config_hash,
                                        const std::vector<int>& bucket_keys) {
  return Register(w, model, config_hash, bucket_keys, ShardClaim{});
}

RegisterResult ParameterStore::Register(const WorkerId& w, const std::vector<TensorSpec>& model,
                                        const std::string& config_hash,
                                        const std::vector<int>& bucket_keys,
                                        const ShardClaim& shard) {
  std::unique_lock<std::mutex> lock(mu_);
  GP_ENFORCE(!w.name.empty(), "worker_id must not be empty");
  const int shards = shard.shards == 0 ? 1 : shard.shards;
  GP_REFUSE(FailedPrecondition, Reason::kConfigMismatch,
            shards == opt_.shards && shard.shard == opt_.shard, "worker '", w.name,
            "' registers for shard ", shard.shard, " of ", shards, "; this server is shard ",
            opt_.shard, " of ", opt_.shards,
            " (cluster.servers must list the shards in --shard order)");
  GP_REFUSE(FailedPrecondition, Reason::kConfigMismatch,
            !placement_set_ || shard.placement_hash == placement_hash_, "worker '", w.name,
            "' places the model's partitions differently (placement hash ", shard.placement_hash,
            ", first worker's ", placement_hash_,
            "): every worker needs the same model, cluster.servers and cluster.partition_mb");
  GP_ENFORCE(!model.empty(), "worker '", w.name, "' registered an empty model");
  if (!bucket_keys.empty()) {
    int64_t total = 0;
    for (int n : bucket_keys) {
      GP_ENFORCE(n >= 1, "worker '", w.name, "': a bucket of ", n, " keys");
      total += n;
    }
    GP_ENFORCE(total == static_cast<int64_t>(model.size()), "worker '", w.name, "': buckets hold ",
               total, " keys, the model has ", model.size());
    GP_ENFORCE(!opt_.async || bucket_keys.size() == 1, "worker '", w.name,
               "': async mode applies whole pushes; it takes no buckets");
  }
  if (model_.empty()) {
    std::set<std::string> seen;
    double bytes = 0;  // as float32, which the server holds
    for (const auto& t : model) {
      GP_ENFORCE(seen.insert(t.key).second, "model has key '", t.key, "' twice");
      bytes += 4.0 * static_cast<double>(NumelOf(t.shape));
    }
    // The server allocates weights, accumulator, staging, result and momentum for it at
    // once: a model that cannot fit is refused here, not by the allocator (or the OOM killer).
    GP_ENFORCE(bytes <= static_cast<double>(opt_.max_model_bytes), "worker '", w.name,
               "' registered a model of ", bytes / (1 << 20), " MB; the server takes at most ",
               opt_.max_model_bytes >> 20, " MB (server.max_model_mb)");
    SetModel(model, config_hash);
  } else {
    GP_REFUSE(FailedPrecondition, Reason::kConfigMismatch, config_hash == model_.config_hash(),
              "worker '", w.name, "' runs another job config (hash ", config_hash,
              ", first worker's ", model_.config_hash(), ")");
    const auto& mine = model_.specs();
    for (size_t i = 0; i < std::max(model.size(), mine.size()); ++i) {
      GP_REFUSE(FailedPrecondition, Reason::kModelMismatch, i < model.size(),
                "model fingerprint differs: key '", mine[i].key, "' is missing from worker '",
                w.name, "'");
      GP_REFUSE(FailedPrecondition, Reason::kModelMismatch, i < mine.size(),
                "model fingerprint differs: key '", model[i].key, "' of worker '", w.name,
                "' is not in the first model");
      const TensorSpec &a = mine[i], &b = model[i];
      GP_REFUSE(FailedPrecondition, Reason::kModelMismatch,
                a.key == b.key && a.shape == b.shape && a.dtype == b.dtype,
                "model fingerprint differs at ", ModelDiff(a, b));
    }
  }
  // The first worker (after a start or a restore) fixes the split; all others must match.
  const std::vector<int> split = bucket_keys.size() == 1 ? std::vector<int>{} : bucket_keys;
  if (!agg_.layout_set) {
    GP_REFUSE(FailedPrecondition, Reason::kModelMismatch, agg_.Idle() || split == agg_.split(),
              "worker '", w.name, "': cannot change the bucket split while a step is open");
    if (split != agg_.split()) agg_.Split(split, model_.size(), step_);
    agg_.layout_set = true;
  } else {
    GP_REFUSE(FailedPrecondition, Reason::kModelMismatch, split == agg_.split(), "worker '", w.name,
              "' splits the ", "model into ", std::max<size_t>(1, split.size()),
              " buckets, the first worker ", "into ", std::max<size_t>(1, agg_.split().size()),
              " (sync.bucket_mb differs)");
  }
  if (!placement_set_) {
    placement_hash_ = shard.placement_hash;
    placement_set_ = true;
  }
  if (shard.catch_up_step > 0) CatchUp(&lock, w, shard.catch_up_step);
  const Member& m = members_.Join(w, step_);
  return {m.rank, opt_.workers, step_, model_.initialized};
}

void StoreState::CatchUp(std::unique_lock<std::mutex>* lock, const WorkerId& w, int64_t step) {
  // Only a shard of several that has done nothing since it (re)started, once.
  if (opt_.shards < 2 || catch_up_done_ || step_ != started_at_ || !agg_.Idle()) return;
  if (catch_up_asks_.empty()) catch_up_first_ = Clock::now();
  catch_up_asks_[w.name] = step;
  step_cv_.notify_all();
  // Every worker asks, each with the step its call failed at: they may stand a step apart
  // (the shard died after sending one of them a step's result). The shard goes to the
  // earliest; a worker a step ahead sends its kept push of that step again.
  const size_t expected =
      members_.empty() ? static_cast<size_t>(opt_.workers) : members_.members().size();
  const auto timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(opt_.worker_timeout_s));
  step_cv_.wait_until(*lock, catch_up_first_ + timeout, [&] {
    return shutdown_ || catch_up_done_ || catch_up_asks_.size() >= expected;
  });
  // A worker a step ahead sends its kept push of the step once the shard has the weights of
  // a worker at that step (InitWeights): it is answered after that.
  auto await_weights = [&] {
    if (step > step_)
      step_cv_.wait_until(*lock, Clock::now() + timeout,
                          [&] { return shutdown_ || model_.initialized; });
  };
  if (shutdown_) return;
  if (catch_up_done_) return await_weights();
  catch_up_done_ = true;
  int64_t target = step;
  std::string asks;
  for (const auto& [name, s] : catch_up_asks_) {
    target = std::min(target, s);
    asks += (asks.empty() ? "" : ", ") + name + " " + std::to_string(s);
  }
  step_cv_.notify_all();
  if (target == step_) return;
  spdlog::warn(
      "shard {}: restarted at step {}, behind the job (workers at: {}): brought to step {}; "
      "its weights come from a worker at that step; its server momentum and pull-codec state "
      "are those of step {}",
      opt_.shard, step_, asks, target, step_);
  step_ = target;
  started_at_ = target;
  agg_.SetStep(target);
  stats_.steps = target;
  model_.initialized = false;  // the first worker's InitWeights seeds the weights
  model_.initialized_by = {};
  await_weights();
}

Member& StoreState::CheckWorker(const WorkerId& w) { return members_.Check(w, step_); }

void StoreState::Reject(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.rejected[reason];
}

bool ParameterStore::InitWeights(const WorkerId& w, const std::vector<KeyPayload>& weights) {
  auto won = [&] {
    return model_.initialized_by.name == w.name &&
           model_.initialized_by.incarnation == w.incarnation;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    CheckWorker(w);
    if (model_.initialized) return won();
  }
  const auto ordered = model_.Validate(weights, Rejecter());  // the checks of a push
  std::unique_lock<std::mutex> lock(mu_);
  if (model_.initialized) return won();
  KeyHold hold(&holds_, &lock, &step_cv_, KeyHolds::kWrite);  // decoded without mu_
  if (model_.initialized) return won();  // another call won while this one waited
  Unlocked(&lock, [&] { model_.DecodeWeights(ordered); });
  model_.initialized = true;
  model_.initialized_by = w;
  spdlog::info("initial weights from worker '{}' ({} keys)", w.name, model_.size());
  step_cv_.notify_all();  // a catching-up shard's workers ahead wait for them (CatchUp)
  return true;
}

}  // namespace gradpress::server
