// ParameterStore, part four: checkpoints of the server's state (shared/DESIGN.md,
// "Reliability rules"). Sections: "meta" (step, weights version, initialized, config hash,
// model fingerprint), "members" (name, incarnation, rank per registered worker) and per key
// "weights/<key>", "momentum/<key>" (empty before the first step with momentum), "pull/<key>"
// (the pull codec's SaveState).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "common/byte_io.h"
#include "common/error.h"
#include "server/parameter_store.h"
#include "server/parameter_store_lane.h"

namespace gradpress::server {

Checkpoint ParameterStore::SaveCheckpoint() const {
  std::lock_guard<std::mutex> lock(mu_);
  return SaveCheckpointLocked();
}

Checkpoint ParameterStore::SaveCheckpointLocked() const {
  Checkpoint c;
  c.step = step_;
  std::string meta;
  ByteWriter w(&meta);
  w.Put<uint64_t>(static_cast<uint64_t>(step_));
  w.Put<uint64_t>(static_cast<uint64_t>(weights_version_));
  w.Put<uint8_t>(initialized_ ? 1 : 0);
  w.PutVarint(config_hash_.size());
  w.PutBytes(config_hash_.data(), config_hash_.size());
  w.PutVarint(model_.size());
  for (const TensorSpec& t : model_) {
    w.PutVarint(t.key.size());
    w.PutBytes(t.key.data(), t.key.size());
    w.Put<uint8_t>(static_cast<uint8_t>(t.dtype));
    w.PutVarint(t.shape.size());
    for (int64_t d : t.shape) w.PutVarint(static_cast<uint64_t>(d));
  }
  c.Put("meta", std::move(meta));
  std::string members;
  ByteWriter m(&members);
  m.PutVarint(workers_.size());
  for (const auto& [name, ws] : workers_) {
    m.PutVarint(name.size());
    m.PutBytes(name.data(), name.size());
    m.Put<uint64_t>(ws.incarnation);
    m.Put<int32_t>(ws.rank);
  }
  c.Put("members", std::move(members));
  for (size_t i = 0; i < model_.size(); ++i) {
    const KeyState& k = *keys_[i];
    const std::string& key = model_[i].key;
    c.Put("weights/" + key, FloatBytes(k.weights.data(), k.weights.size()));
    c.Put("momentum/" + key,
          FloatBytes(k.sgd.momentum_buffer.data(), k.sgd.momentum_buffer.size()));
    std::string pull;
    k.pull->SaveState(&pull);
    c.Put("pull/" + key, std::move(pull));
  }
  return c;
}

void ParameterStore::RestoreCheckpoint(const Checkpoint& c) {
  std::lock_guard<std::mutex> lock(mu_);
  GP_ENFORCE_AS(FailedPrecondition, workers_.empty() && model_.empty(),
                "a checkpoint can only be restored before any worker registers");
  const std::string context = "server checkpoint " + c.path;
  ByteReader r(c.Get("meta"), context.c_str());
  const auto step = static_cast<int64_t>(r.Get<uint64_t>("step"));
  const auto version = static_cast<int64_t>(r.Get<uint64_t>("weights version"));
  const bool initialized = r.Get<uint8_t>("initialized") != 0;
  const uint64_t hash_len = r.GetVarint("config hash length");
  GP_ENFORCE(hash_len <= r.remaining(), context, ": config hash of ", hash_len, " bytes");
  const std::string hash(r.GetBytes(hash_len, "config hash"));
  const uint64_t keys = r.GetVarint("key count");
  GP_ENFORCE(keys <= r.remaining(), context, ": ", keys, " keys in ", r.remaining(), " bytes");
  std::vector<TensorSpec> model(keys);
  for (TensorSpec& t : model) {
    const uint64_t len = r.GetVarint("key length");
    GP_ENFORCE(len <= r.remaining(), context, ": key of ", len, " bytes");
    t.key = std::string(r.GetBytes(len, "key"));
    const auto dtype = r.Get<uint8_t>("dtype");
    GP_ENFORCE(dtype <= static_cast<uint8_t>(compressors::DType::kFloat64), context, ": key '",
               t.key, "' has unknown dtype ", static_cast<int>(dtype));
    t.dtype = static_cast<compressors::DType>(dtype);
    const uint64_t dims = r.GetVarint("dims");
    GP_ENFORCE(dims <= 16, context, ": key '", t.key, "' has ", dims, " dimensions");
    for (uint64_t d = 0; d < dims; ++d) t.shape.push_back(static_cast<int64_t>(r.GetVarint("dim")));
  }
  r.ExpectEnd();
  GP_ENFORCE(step == c.step, context, ": meta says step ", step, ", the header ", c.step);
  std::map<std::string, WorkerState> members;  // absent in checkpoints before membership
  int next_rank = 0;
  if (c.Has("members")) {
    ByteReader mr(c.Get("members"), context.c_str());
    const uint64_t n = mr.GetVarint("member count");
    GP_ENFORCE(n <= mr.remaining(), context, ": ", n, " members in ", mr.remaining(), " bytes");
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t len = mr.GetVarint("member name length");
      GP_ENFORCE(len <= mr.remaining(), context, ": member name of ", len, " bytes");
      const std::string name(mr.GetBytes(len, "member name"));
      WorkerState ws;
      ws.incarnation = mr.Get<uint64_t>("incarnation");
      ws.rank = mr.Get<int32_t>("rank");
      GP_ENFORCE(ws.rank >= 0 && ws.rank < 1 << 20, context, ": member '", name, "' has rank ",
                 ws.rank);
      ws.live = false;
      ws.restored = true;
      ws.last_seen = Clock::now();
      next_rank = std::max(next_rank, ws.rank + 1);
      GP_ENFORCE(members.emplace(name, ws).second, context, ": member '", name, "' twice");
    }
    mr.ExpectEnd();
  }
  // Build the keys, then fill them; nothing is kept if any key does not fit.
  SetModel(model, hash);
  try {
    for (size_t i = 0; i < model_.size(); ++i) {
      KeyState& k = *keys_[i];
      const std::string& key = model_[i].key;
      std::vector<float> weights = BytesToFloats(c.Get("weights/" + key), context + " " + key);
      GP_ENFORCE(static_cast<int64_t>(weights.size()) == k.numel, context, ": key '", key, "' has ",
                 weights.size(), " weights, its shape ", k.numel);
      std::vector<float> momentum =
          BytesToFloats(c.Get("momentum/" + key), context + " momentum " + key);
      GP_ENFORCE(momentum.empty() || static_cast<int64_t>(momentum.size()) == k.numel, context,
                 ": key '", key, "' has ", momentum.size(), " momentum values, its shape ",
                 k.numel);
      k.pull->LoadState(c.Get("pull/" + key));
      k.weights = std::move(weights);
      k.sgd.momentum_buffer = std::move(momentum);
    }
  } catch (...) {
    model_.clear();
    key_index_.clear();
    keys_.clear();
    lanes_.clear();
    config_hash_.clear();
    throw;
  }
  workers_ = std::move(members);
  next_rank_ = next_rank;
  first_register_ = Clock::now();
  step_ = step;
  for (auto& lane : lanes_) lane->step = step;
  layout_set_ = false;  // the first worker back brings its bucket split
  weights_version_ = version;
  initialized_ = initialized;
  last_checkpoint_step_ = step;
  stats_.steps = step;
  spdlog::info("restored {} at step {} ({} keys, {} members to register again)",
               c.path.empty() ? "checkpoint" : c.path, step, model_.size(), workers_.size());
}

std::string ParameterStore::WriteCheckpoint() {
  std::lock_guard<std::mutex> lock(mu_);
  return WriteCheckpointLocked();
}

std::string ParameterStore::WriteCheckpointLocked() {
  if (opt_.checkpoint_dir.empty() || model_.empty() || last_checkpoint_step_ == step_) return "";
  if (!LanesEven()) {  // some buckets of the open step are done: the weights are mid-step
    spdlog::warn(
        "no checkpoint of step {}: part of the next step is applied; the newest "
        "checkpoint stays the previous one",
        step_);
    return "";
  }
  const std::string path =
      gradpress::SaveCheckpoint(opt_.checkpoint_dir, SaveCheckpointLocked(), opt_.checkpoint_keep);
  last_checkpoint_step_ = step_;
  spdlog::info("checkpoint of step {} written to {}", step_, path);
  return path;
}

void ParameterStore::MaybeCheckpoint() {
  if (opt_.checkpoint_every <= 0 || step_ % opt_.checkpoint_every != 0) return;
  try {
    WriteCheckpointLocked();
  } catch (const Error& e) {
    // A full disk must not stop training: the previous checkpoint stays valid.
    spdlog::error("checkpoint of step {} failed: {}", step_, e.what());
  }
}

}  // namespace gradpress::server
