// ParameterStore: checkpoints of the server's state (shared/DESIGN.md, "Reliability rules").
// Sections: "meta" (step, weights version, initialized, config hash, model fingerprint),
// "members" (name, incarnation, rank per registered worker) and per key "weights/<key>",
// "momentum/<key>" (empty before the first step with momentum), "pull/<key>" (the pull
// codec's SaveState). Meta and members are taken under the store's lock; the keys are copied
// without it, holding them as a reader (no lane finalizes meanwhile, so every lane stays at
// the checkpoint's step), and the file is written and fsynced holding nothing.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "common/byte_io.h"
#include "common/error.h"
#include "server/parameter_store.h"

namespace gradpress::server {

Checkpoint ParameterStore::SaveCheckpoint() const {
  std::unique_lock<std::mutex> lock(mu_);
  KeyHold hold(&holds_, &lock, &step_cv_, KeyHolds::kRead);
  Checkpoint c = CheckpointMeta(step_);
  // Without a model (no key to copy), a Register may set one: nothing is read without mu_.
  if (!model_.empty()) Unlocked(&lock, [&] { model_.Save(&c); });
  return c;
}

Checkpoint StoreState::CheckpointMeta(int64_t step) const {
  Checkpoint c;
  c.step = step;
  std::string meta;
  ByteWriter w(&meta);
  w.Put<uint64_t>(static_cast<uint64_t>(step));
  w.Put<uint64_t>(static_cast<uint64_t>(model_.weights_version));
  w.Put<uint8_t>(model_.initialized ? 1 : 0);
  const std::string& hash = model_.config_hash();
  w.PutVarint(hash.size());
  w.PutBytes(hash.data(), hash.size());
  w.PutVarint(model_.size());
  for (const TensorSpec& t : model_.specs()) {
    w.PutVarint(t.key.size());
    w.PutBytes(t.key.data(), t.key.size());
    w.Put<uint8_t>(static_cast<uint8_t>(t.dtype));
    w.PutVarint(t.shape.size());
    for (int64_t d : t.shape) w.PutVarint(static_cast<uint64_t>(d));
  }
  c.Put("meta", std::move(meta));
  std::string members;
  ByteWriter m(&members);
  members_.Save(&m);
  c.Put("members", std::move(members));
  return c;
}

void ParameterStore::RestoreCheckpoint(const Checkpoint& c) {
  std::lock_guard<std::mutex> lock(mu_);
  GP_REFUSE(FailedPrecondition, Reason::kBadRequest, members_.empty() && model_.empty(),
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
  Membership members(opt_.workers, opt_.worker_timeout_s);  // none in checkpoints before them
  if (c.Has("members")) {
    ByteReader mr(c.Get("members"), context.c_str());
    members.Restore(&mr, context);
  }
  // Build the keys, then fill them; nothing is kept if any key does not fit.
  SetModel(model, hash);
  try {
    model_.Load(c, context);
  } catch (...) {
    model_.Clear();
    agg_.Clear();
    throw;
  }
  members_ = std::move(members);
  step_ = step;
  agg_.SetStep(step);
  agg_.layout_set = false;  // the first worker back brings its bucket split
  model_.weights_version = version;
  model_.initialized = initialized;
  last_checkpoint_step_ = step;
  started_at_ = step;
  stats_.steps = step;
  spdlog::info("restored {} at step {} ({} keys, {} members to register again)",
               c.path.empty() ? "checkpoint" : c.path, step, model_.size(),
               members_.members().size());
}

std::string ParameterStore::WriteCheckpoint() {
  std::unique_lock<std::mutex> lock(mu_);
  return WriteCheckpointLocked(&lock);
}

std::string StoreState::WriteCheckpointLocked(std::unique_lock<std::mutex>* lock) {
  if (opt_.checkpoint_dir.empty() || model_.empty() || last_checkpoint_step_ >= step_) return "";
  // Holds the keys for reading: a finalize in progress ends first, none starts until copied.
  KeyHold hold(&holds_, lock, &step_cv_, KeyHolds::kRead);
  if (last_checkpoint_step_ >= step_) return "";
  if (!agg_.Even()) {  // some buckets of the open step are done: the weights are mid-step
    spdlog::warn(
        "no checkpoint of step {}: part of the next step is applied; the newest "
        "checkpoint stays the previous one",
        step_);
    return "";
  }
  Checkpoint c = CheckpointMeta(step_);
  Unlocked(lock, [&] { model_.Save(&c); });
  AwaitCheckpointTurn(lock);  // still holding the keys: files go out in step order
  hold.Release();
  return WriteCheckpointFile(lock, std::move(c));
}

void StoreState::AwaitCheckpointTurn(std::unique_lock<std::mutex>* lock) {
  step_cv_.wait(*lock, [&] { return !checkpoint_writing_; });
  checkpoint_writing_ = true;
}

std::string StoreState::WriteCheckpointFile(std::unique_lock<std::mutex>* lock, Checkpoint c) {
  struct Done {  // the next file's turn
    StoreState* s;
    ~Done() {
      s->checkpoint_writing_ = false;
      s->step_cv_.notify_all();
    }
  } done{this};
  const bool written = last_checkpoint_step_ >= c.step;  // this step's, meanwhile
  std::string path;
  Unlocked(lock, [&] {
    if (!written) path = gradpress::SaveCheckpoint(opt_.checkpoint_dir, c, opt_.checkpoint_keep);
    Checkpoint().sections.swap(c.sections);  // its copy of the keys freed without mu_
  });
  if (written) return "";
  last_checkpoint_step_ = c.step;
  spdlog::info("checkpoint of step {} written to {}", c.step, path);
  return path;
}

void StoreState::MaybeCheckpoint(std::unique_lock<std::mutex>* lock) {
  if (opt_.checkpoint_every <= 0 || step_ % opt_.checkpoint_every != 0) return;
  const int64_t step = step_;
  try {
    WriteCheckpointLocked(lock);
  } catch (const Error& e) {
    // A full disk must not stop training: the previous checkpoint stays valid.
    spdlog::error("checkpoint of step {} failed: {}", step, e.what());
  }
}

}  // namespace gradpress::server
