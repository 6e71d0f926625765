// The Trainer's checkpoints, resume and rejoin (shared/DESIGN.md, "Reliability rules").
// Sections: "meta" (step, syncs, local steps since the last sync, rank, workers, config
// hash), "torch" (a LibTorch archive: model parameters and buffers, optimizer state, method
// 6's anchor), "rng" (the augmentation RNG), "push" (CodecState::SaveState, key_codecs.h),
// "auto" (compress.auto's push codec per key, a shorthand a line, when it chose). A
// checkpoint's step is the server step, so worker and server checkpoints of one moment share a
// number.
#include <spdlog/spdlog.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <sstream>

#include "common/byte_io.h"
#include "common/error.h"
#include "worker/loop/trainer.h"

namespace gradpress::worker {

std::string Trainer::WriteCheckpoint() {
  if (checkpoint_dir_.empty() || !connected_) return "";
  Settle();  // the state after the step's update
  const int64_t at = server_step();
  if (at == last_checkpoint_) return "";
  Checkpoint c;
  c.step = at;
  std::string meta;
  ByteWriter w(&meta);
  const ExchangeState state = engine_->State();
  w.Put<int64_t>(step());
  w.Put<int64_t>(state.server_step);
  w.Put<int64_t>(state.since_exchange);
  w.Put<int32_t>(opt_.rank);
  w.Put<int32_t>(opt_.workers);
  const std::string hash = ConfigHash(opt_.config);
  w.PutVarint(hash.size());
  w.PutBytes(hash.data(), hash.size());
  c.Put("meta", std::move(meta));

  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive model_archive(archive.compilation_unit());
  model_->save(model_archive);
  archive.write("model", model_archive);
  if (optimizer_) {
    torch::serialize::OutputArchive optimizer_archive(archive.compilation_unit());
    optimizer_->save(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
  }
  const std::vector<torch::Tensor>& anchor = state.tensors;  // method 6's
  for (size_t i = 0; i < anchor.size(); ++i)
    archive.write("anchor_" + std::to_string(i), anchor[i], /*is_buffer=*/true);
  std::ostringstream torch_bytes;
  archive.save_to(torch_bytes);
  c.Put("torch", torch_bytes.str());
  std::ostringstream rng;
  rng << rng_;
  c.Put("rng", rng.str());
  c.Put("push", engine_->codecs().SaveState());
  if (!engine_->auto_codecs().empty()) {
    std::string lines;
    for (const CodecSpec& s : engine_->auto_codecs()) lines += s.ToShorthand() + "\n";
    c.Put("auto", lines);
  }
  try {
    const std::string path = SaveCheckpoint(checkpoint_dir_, c, opt_.config.train.checkpoint_keep);
    last_checkpoint_ = at;
    spdlog::info("worker-{} checkpoint of step {} written to {}", opt_.rank, at, path);
    return path;
  } catch (const Error& e) {
    // A full disk must not stop training: the previous checkpoint stays valid.
    spdlog::error("worker-{} checkpoint of step {} failed: {}", opt_.rank, at, e.what());
    return "";
  }
}

void Trainer::RestoreCheckpoint(const Checkpoint& c) {
  const std::string context = "worker checkpoint " + c.path;
  ByteReader r(c.Get("meta"), context.c_str());
  const auto step = r.Get<int64_t>("step");
  const auto sync_round = r.Get<int64_t>("syncs");
  const auto since_sync = r.Get<int64_t>("steps since sync");
  const auto rank = r.Get<int32_t>("rank");
  const auto workers = r.Get<int32_t>("workers");
  const uint64_t hash_len = r.GetVarint("config hash length");
  GP_ENFORCE(hash_len <= r.remaining(), context, ": config hash of ", hash_len, " bytes");
  const std::string hash(r.GetBytes(hash_len, "config hash"));
  r.ExpectEnd();
  GP_ENFORCE_AS(FailedPrecondition, rank == opt_.rank && workers == opt_.workers, context,
                " belongs to rank ", rank, " of ", workers, ", not rank ", opt_.rank, " of ",
                opt_.workers);
  GP_ENFORCE_AS(FailedPrecondition, hash == ConfigHash(opt_.config), context,
                " was written by another job config (hash ", hash, ", now ",
                ConfigHash(opt_.config), "): resume with the same config and --set overrides");
  GP_ENFORCE(step >= 0 && sync_round >= 0 && since_sync >= 0, context, ": negative step");

  std::istringstream torch_bytes(c.Get("torch"));
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(torch_bytes, device_);
    torch::serialize::InputArchive model_archive;
    archive.read("model", model_archive);
    model_->load(model_archive);
    if (optimizer_) {
      torch::serialize::InputArchive optimizer_archive;
      archive.read("optimizer", optimizer_archive);
      optimizer_->load(optimizer_archive);
    }
    std::vector<torch::Tensor> anchor = engine_->State().tensors;  // read in place
    for (size_t i = 0; i < anchor.size(); ++i)
      archive.read("anchor_" + std::to_string(i), anchor[i], /*is_buffer=*/true);
  } catch (const c10::Error& e) {
    throw InvalidArgument(context +
                          ": the model or optimizer does not load: " + e.what_without_backtrace());
  }
  std::istringstream rng(c.Get("rng"));
  rng >> rng_;
  GP_ENFORCE(!rng.fail(), context, ": the augmentation RNG state does not parse");
  if (c.Has("auto")) {  // the codecs the state was saved with, whatever this start chose
    std::vector<CodecSpec> chosen;
    std::istringstream lines(c.Get("auto"));
    for (std::string line; std::getline(lines, line);) chosen.push_back(ParseCodecShorthand(line));
    engine_->SetAutoCodecs(std::move(chosen));
  }
  engine_->codecs().LoadState(c.Get("push"));
  engine_->Restore(step, sync_round, since_sync);
  last_checkpoint_ = c.step;
}

void Trainer::Resume(int64_t server_step) {
  GP_ENFORCE(!checkpoint_dir_.empty(),
             "resume needs a checkpoint directory: give the worker --run-dir (or "
             "--checkpoint-dir)");
  const auto all = ListCheckpoints(checkpoint_dir_);
  if (all.empty()) {
    spdlog::info("worker-{}: no checkpoint in {}: starting at server step {}", opt_.rank,
                 checkpoint_dir_, server_step);
    return;
  }
  if (opt_.config.sync.mode == "async") {
    // Async steps are the worker's own: resume its newest checkpoint (data cursor, residuals)
    // and take the server's current weights, which moved on without it.
    std::optional<Checkpoint> c = LoadLatestCheckpoint(checkpoint_dir_);
    GP_ENFORCE(c.has_value(), "no readable checkpoint in ", checkpoint_dir_);
    RestoreCheckpoint(*c);
    std::vector<torch::Tensor> weights = Parameters();
    engine_->client().PullWeights(&weights);
    spdlog::info("worker-{}: resumed from {} (own step {}, async)", opt_.rank, c->path, step());
    return;
  }
  std::optional<Checkpoint> c =
      LoadLatestCheckpoint(checkpoint_dir_, [&](int64_t s) { return s == server_step; });
  if (c) {
    RestoreCheckpoint(*c);
    spdlog::info("worker-{}: resumed from {} (step {})", opt_.rank, c->path, step());
    return;
  }
  std::string have;
  for (const auto& [s, path] : all) have += (have.empty() ? "" : ", ") + std::to_string(s);
  const bool shadow = engine_->traits().server_weights == ExchangeTraits::ServerWeights::kShadow;
  if (shadow) {
    // Gradient methods with server.shadow_weights: the server holds the weights every worker
    // holds. Go on from this worker's newest checkpoint (residuals, RNG: server_step - its
    // step steps old) with the server's current weights, momentum (where it keeps the
    // workers' optimizer's: StepEngine::AdoptServerWeights) and step. A
    // checkpoint newer than the server's step (the server fell back past it) is the last
    // choice: its optimizer state comes from steps the server no longer has.
    std::optional<Checkpoint> newest =
        LoadLatestCheckpoint(checkpoint_dir_, [&](int64_t s) { return s <= server_step; });
    if (!newest) newest = LoadLatestCheckpoint(checkpoint_dir_);
    GP_ENFORCE(newest.has_value(), "no readable checkpoint in ", checkpoint_dir_);
    RestoreCheckpoint(*newest);
    engine_->AdoptServerWeights(server_step);  // and the server's momentum, where it keeps it
    last_checkpoint_ = -1;
    spdlog::warn(
        "worker-{}: no checkpoint of server step {} in {} (it has steps {}): resumed from {} "
        "with the server's weights of step {} (residuals {} steps old)",
        opt_.rank, server_step, checkpoint_dir_, have, newest->path, server_step,
        server_step - newest->step);
    return;
  }
  if (engine_->traits().server_weights == ExchangeTraits::ServerWeights::kModel) {
    // The server's weights are the model: going on from them loses only push residuals.
    spdlog::warn(
        "worker-{}: no checkpoint of server step {} in {} (it has steps {}): continuing from "
        "the server's weights with fresh push residuals",
        opt_.rank, server_step, checkpoint_dir_, have);
    return;
  }
  throw FailedPrecondition("no worker checkpoint of the server's step " +
                           std::to_string(server_step) + " in " + checkpoint_dir_ +
                           " (it has steps " + have +
                           "): restart the server with --resume auto, or with --resume <its "
                           "checkpoint file of one of these steps> (server.shadow_weights lets "
                           "a lone worker of methods 3-6 rejoin a running server)");
}

int64_t Trainer::Rejoin(const Error& why) {
  const int64_t before = step();
  // Cross-barrier: the step that failed was being applied bucket by bucket (step() is past it).
  const bool half_applied = held_.has_value();
  held_.reset();  // a step whose exchange failed is not reported
  spdlog::warn("worker-{} step {}: the server lost this worker ({}); registering again", opt_.rank,
               step(), why.what());
  const std::vector<int> behind =
      engine_->shard_rejoin() ? engine_->shard_rejoin()->ShardsBehind() : std::vector<int>{};
  if (!behind.empty()) {
    // Some shards restarted from older checkpoints; the others hold the job at this step.
    // Those are brought to it with this worker's weights, and the step runs again: nothing
    // rolls back (the others answer the step again from the result they kept).
    GP_REFUSE(FailedPrecondition, Reason::kBadRequest, !half_applied, "worker-", opt_.rank,
              ": a shard restarted behind the job while step ", step() - 1,
              " was half applied (sync.cross_barrier); stop the job and start every process "
              "again with --resume auto");
    std::vector<torch::Tensor> weights = Parameters();
    engine_->shard_rejoin()->RejoinShards(behind, step(), &weights);
    std::string which;
    for (int s : behind) which += (which.empty() ? "" : ",") + std::to_string(s);
    spdlog::warn("worker-{}: shard(s) {} rejoined at step {} (0 steps rolled back)", opt_.rank,
                 which, step());
    files_.Rejoin(step(), 0, which);
    return 0;
  }
  const bool shadow = engine_->traits().server_weights == ExchangeTraits::ServerWeights::kShadow;
  const bool has_checkpoints =
      !checkpoint_dir_.empty() && !ListCheckpoints(checkpoint_dir_).empty();
  if (!has_checkpoints &&
      engine_->traits().server_weights != ExchangeTraits::ServerWeights::kModel && !shadow)
    return -1;
  connected_ = false;
  Connect(/*resume=*/has_checkpoints);  // the checkpoint of the server's step, if any
  if (!has_checkpoints && shadow) {
    // No checkpoint: go on from the server's copy of the workers' weights.
    engine_->AdoptServerWeights(server_step());
  }
  const int64_t lost = std::max<int64_t>(0, before - step());
  spdlog::warn("worker-{}: rejoined at step {} ({} steps rolled back)", opt_.rank, step(), lost);
  files_.Rejoin(step(), lost, "");
  return lost;
}

}  // namespace gradpress::worker
