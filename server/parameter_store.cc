#include "server/parameter_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>

#include "common/error.h"
#include "common/tensor_bytes.h"
#include "common/timer.h"
#include "compressors/error_feedback.h"
#include "compressors/registry.h"
#include "server/parameter_store_lane.h"

namespace gradpress::server {

using compressors::Compressor;
using compressors::Payload;

namespace {

std::string ModelDiff(const TensorSpec& a, const TensorSpec& b) {
  std::ostringstream os;
  os << "key '" << b.key << "': shape " << ShapeToString(b.shape) << " "
     << compressors::DTypeName(b.dtype) << " vs the first model's '" << a.key << "' "
     << ShapeToString(a.shape) << " " << compressors::DTypeName(a.dtype);
  return os.str();
}

std::vector<float>& Scratch(int64_t n) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < n) scratch.resize(n);
  return scratch;
}

}  // namespace

uint64_t StepResult::PayloadBytes() const {
  uint64_t b = 0;
  for (const auto& p : payloads) b += p.payload.bytes.size();
  return b;
}

ParameterStore::ParameterStore(StoreOptions options)
    : opt_(std::move(options)), pool_(std::max(1, opt_.threads)) {
  compressors::RegisterBuiltinCompressors();
  GP_ENFORCE(opt_.workers >= 1, "server needs at least one worker, got ", opt_.workers);
  GP_ENFORCE(!opt_.async || opt_.exchange_weights,
             "async mode applies each push to the server's weights: it needs exchange=weights");
  compressors::MakeCompressor(opt_.pull);  // validates the pull codec now, not at step 1
}

ParameterStore::~ParameterStore() { Shutdown(); }

void ParameterStore::SetModel(const std::vector<TensorSpec>& model,
                              const std::string& config_hash) {
  model_ = model;
  config_hash_ = config_hash;
  for (size_t i = 0; i < model_.size(); ++i) {
    key_index_[model_[i].key] = i;
    auto k = std::make_unique<KeyState>();
    k->numel = NumelOf(model_[i].shape);
    k->weights.assign(k->numel, 0.f);
    k->accum.assign(k->numel, 0.f);
    k->block_mu.reset(new std::mutex[(k->numel + kBlock - 1) / kBlock + 1]);
    compressors::CompressorConfig pull = opt_.pull;
    if (!compressors::TravelsCompressed(model_[i].shape, opt_.min_numel, opt_.skip_1d)) {
      pull = {};
    }
    k->pull = compressors::MakeCompressor(pull);
    keys_.push_back(std::move(k));
  }
  SetLanes({});
}

void ParameterStore::SetLanes(const std::vector<int>& bucket_keys) {
  std::vector<std::unique_ptr<Lane>> lanes;
  size_t begin = 0;
  const std::vector<int> whole{static_cast<int>(keys_.size())};
  for (int n : bucket_keys.empty() ? whole : bucket_keys) {
    auto lane = std::make_unique<Lane>();
    lane->index = static_cast<int>(lanes.size());
    lane->begin = begin;
    lane->end = begin += static_cast<size_t>(n);
    lane->step = step_;
    // Keep what the workers contributed (duplicates are recognised across a re-split).
    for (const auto& old : lanes_) {
      for (const auto& [name, s] : old->last_step)
        lane->last_step[name] = std::max(lane->LastStep(name), s);
    }
    lanes.push_back(std::move(lane));
  }
  lanes_ = std::move(lanes);
  bucket_keys_ = bucket_keys;
}

int ParameterStore::buckets() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(lanes_.size());
}

ParameterStore::Lane& ParameterStore::LaneOf(int bucket, const WorkerId& w) {
  if (bucket < 0) {
    GP_ENFORCE(lanes_.size() == 1, "worker '", w.name, "': this job pushes by bucket (",
               lanes_.size(), " buckets registered); the push names none");
    return *lanes_.front();
  }
  GP_ENFORCE(static_cast<size_t>(bucket) < lanes_.size(), "worker '", w.name, "': bucket ", bucket,
             " outside the ", lanes_.size(), " registered");
  return *lanes_[bucket];
}

RegisterResult ParameterStore::Register(const WorkerId& w, const std::vector<TensorSpec>& model,
                                        const std::string& config_hash,
                                        const std::vector<int>& bucket_keys) {
  std::lock_guard<std::mutex> lock(mu_);
  GP_ENFORCE(!w.name.empty(), "worker_id must not be empty");
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
    GP_ENFORCE_AS(FailedPrecondition, config_hash == config_hash_, "worker '", w.name,
                  "' runs another job config (hash ", config_hash, ", first worker's ",
                  config_hash_, ")");
    for (size_t i = 0; i < std::max(model.size(), model_.size()); ++i) {
      GP_ENFORCE_AS(FailedPrecondition, i < model.size(), "model fingerprint differs: key '",
                    model_[i].key, "' is missing from worker '", w.name, "'");
      GP_ENFORCE_AS(FailedPrecondition, i < model_.size(), "model fingerprint differs: key '",
                    model[i].key, "' of worker '", w.name, "' is not in the first model");
      const TensorSpec &a = model_[i], &b = model[i];
      GP_ENFORCE_AS(FailedPrecondition, a.key == b.key && a.shape == b.shape && a.dtype == b.dtype,
                    "model fingerprint differs at ", ModelDiff(a, b));
    }
  }
  // The first worker (after a start or a restore) fixes the split; all others must match.
  const std::vector<int> split = bucket_keys.size() == 1 ? std::vector<int>{} : bucket_keys;
  if (!layout_set_) {
    bool idle = true;
    for (const auto& lane : lanes_) idle = idle && lane->Idle();
    GP_ENFORCE_AS(FailedPrecondition, idle || split == bucket_keys_, "worker '", w.name,
                  "': cannot change the bucket split while a step is open");
    if (split != bucket_keys_) SetLanes(split);
    layout_set_ = true;
  } else {
    GP_ENFORCE_AS(FailedPrecondition, split == bucket_keys_, "worker '", w.name, "' splits the ",
                  "model into ", std::max<size_t>(1, split.size()), " buckets, the first worker ",
                  "into ", std::max<size_t>(1, bucket_keys_.size()), " (sync.bucket_mb differs)");
  }
  auto it = workers_.find(w.name);
  if (it == workers_.end()) {
    GP_ENFORCE_AS(FailedPrecondition, static_cast<int>(workers_.size()) < opt_.workers,
                  "server expects ", opt_.workers, " workers and all have registered; '", w.name,
                  "' is one too many");
    if (workers_.empty()) first_register_ = Clock::now();
    it = workers_.emplace(w.name, WorkerState{}).first;
    it->second.rank = next_rank_++;
  } else {
    GP_ENFORCE_AS(FailedPrecondition, w.incarnation >= it->second.incarnation, "worker '", w.name,
                  "' registered with incarnation ", w.incarnation, " older than the current ",
                  it->second.incarnation);
    if (it->second.restored) {
      // The first member back after a restart starts the wait for the others.
      bool any_back = false;
      for (const auto& [name, ws] : workers_) any_back = any_back || !ws.restored;
      if (!any_back) first_register_ = Clock::now();
      it->second.restored = false;
      spdlog::info("worker '{}' (rank {}) is back after the server's restart, at step {}", w.name,
                   it->second.rank, step_);
    } else if (!it->second.live) {
      spdlog::info("worker '{}' rejoins at step {}", w.name, step_);
    }
  }
  it->second.incarnation = w.incarnation;
  it->second.live = true;
  it->second.last_seen = Clock::now();
  return {it->second.rank, opt_.workers, step_, initialized_};
}

ParameterStore::WorkerState& ParameterStore::CheckWorker(const WorkerId& w) {
  auto it = workers_.find(w.name);
  GP_ENFORCE_AS(NotFound, it != workers_.end(), "worker '", w.name, "' is not registered");
  WorkerState& ws = it->second;
  GP_ENFORCE_AS(FailedPrecondition, w.incarnation >= ws.incarnation, "worker '", w.name,
                "': incarnation ", w.incarnation, " is older than the registered ", ws.incarnation,
                " (a restarted copy has taken over)");
  GP_ENFORCE_AS(FailedPrecondition, !ws.restored, "worker '", w.name,
                "': the server restarted from its checkpoint of step ", step_,
                "; register again to rejoin");
  GP_ENFORCE_AS(FailedPrecondition, w.incarnation == ws.incarnation, "worker '", w.name,
                "': incarnation ", w.incarnation,
                " has not registered (registered: ", ws.incarnation, ")");
  GP_ENFORCE_AS(FailedPrecondition, ws.live, "worker '", w.name,
                "' was dropped from the barrier after ", opt_.worker_timeout_s,
                " s of silence; register again to rejoin");
  ws.last_seen = Clock::now();
  return ws;
}

void ParameterStore::Reject(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  ++stats_.rejected[reason];
}

bool ParameterStore::InitWeights(const WorkerId& w, const std::vector<KeyPayload>& weights) {
  auto won = [&] {
    return initialized_by_.name == w.name && initialized_by_.incarnation == w.incarnation;
  };
  {
    std::lock_guard<std::mutex> lock(mu_);
    CheckWorker(w);
    if (initialized_) return won();
  }
  const auto ordered = Validate(weights);
  std::lock_guard<std::mutex> lock(mu_);
  if (initialized_) return won();
  pool_.ParallelFor(static_cast<int64_t>(keys_.size()), [&](int64_t i) {
    Decoder(ordered[i]->codec)
        .DecodeTo(ordered[i]->bytes, keys_[i]->numel, keys_[i]->weights.data());
  });
  initialized_ = true;
  initialized_by_ = w;
  spdlog::info("initial weights from worker '{}' ({} keys)", w.name, keys_.size());
  return true;
}

const Compressor& ParameterStore::Decoder(const std::string& codec) {
  std::lock_guard<std::mutex> lock(decoders_mu_);
  auto& d = decoders_[codec];
  if (!d) d = compressors::MakeDecoder(codec);
  return *d;
}

std::vector<const Payload*> ParameterStore::Validate(const std::vector<KeyPayload>& pushes) {
  std::vector<const Payload*> ordered(keys_.size(), nullptr);
  try {
    for (const auto& kp : pushes) {
      auto it = key_index_.find(kp.key);
      GP_ENFORCE(it != key_index_.end(), "unknown key '", kp.key, "'");
      GP_ENFORCE(ordered[it->second] == nullptr, "key '", kp.key, "' pushed twice");
      const TensorSpec& spec = model_[it->second];
      GP_ENFORCE(kp.payload.shape == spec.shape, "key '", kp.key, "': shape ",
                 ShapeToString(kp.payload.shape), " does not match the model's ",
                 ShapeToString(spec.shape));
      ordered[it->second] = &kp.payload;
    }
    for (size_t i = 0; i < ordered.size(); ++i)
      GP_ENFORCE(ordered[i] != nullptr, "push is missing key '", model_[i].key, "'");
  } catch (const InvalidArgument&) {
    Reject("bad_key_or_shape");
    throw;
  }
  // Decode every key once to prove it decodes and is finite; nothing is applied yet.
  for (size_t i = 0; i < ordered.size(); ++i) {
    if (ordered[i]->codec != "none") continue;
    const size_t want = static_cast<size_t>(keys_[i]->numel) * sizeof(float);
    if (ordered[i]->bytes.size() != want) {
      Reject("undecodable");
      throw InvalidArgument("key '" + model_[i].key + "': payload does not decode: none: " +
                            std::to_string(ordered[i]->bytes.size()) + " bytes, expected " +
                            std::to_string(want));
    }
  }
  const std::vector<Item> items = Items(ordered);
  std::vector<std::string> errors(items.size());
  std::vector<char> non_finite(items.size(), 0);
  pool_.ParallelFor(static_cast<int64_t>(items.size()), [&](int64_t t) {
    const Item& it = items[t];
    const Payload& p = *ordered[it.key];
    int64_t bad = -1;
    if (it.raw) {
      float block[4096];
      for (int64_t b = it.begin; b < it.end && bad < 0; b += 4096) {
        const int64_t len = std::min<int64_t>(4096, it.end - b);
        std::memcpy(block, p.bytes.data() + b * sizeof(float), len * sizeof(float));
        const int64_t at = FirstNonFinite(block, len);
        if (at >= 0) bad = b + at;
      }
    } else {
      std::vector<float>& scratch = Scratch(keys_[it.key]->numel);
      try {
        Decoder(p.codec).DecodeTo(p.bytes, keys_[it.key]->numel, scratch.data());
      } catch (const Error& e) {
        errors[t] = "key '" + model_[it.key].key + "': payload does not decode: " + e.what();
        return;
      }
      bad = FirstNonFinite(scratch.data(), keys_[it.key]->numel);
    }
    if (bad >= 0) {
      non_finite[t] = 1;
      errors[t] = "key '" + model_[it.key].key + "': decoded gradient has NaN or Inf at element " +
                  std::to_string(bad);
    }
  });
  for (size_t t = 0; t < errors.size(); ++t) {
    if (errors[t].empty()) continue;
    Reject(non_finite[t] ? "non_finite" : "undecodable");
    throw InvalidArgument(errors[t]);
  }
  return ordered;
}

std::vector<ParameterStore::Item> ParameterStore::Items(
    const std::vector<const Payload*>& ordered) const {
  std::vector<Item> items;
  for (size_t i = 0; i < ordered.size(); ++i) {
    const int64_t n = keys_[i]->numel;
    if (ordered[i]->codec != "none") {
      items.push_back({i, 0, n, false});
      continue;
    }
    for (int64_t b = 0; b < n; b += kBlock) items.push_back({i, b, std::min(n, b + kBlock), true});
  }
  return items;
}

// Vectorizes: the largest |bits| of the block; NaN and Inf have all exponent bits set.
int64_t ParameterStore::FirstNonFinite(const float* x, int64_t n) {
  uint32_t worst = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, sizeof(bits));
    worst = std::max(worst, bits & 0x7FFFFFFFu);
  }
  if (worst < 0x7F800000u) return -1;
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return i;
  return -1;
}

std::shared_ptr<const StepResult> ParameterStore::FindResult(const Lane& lane, int64_t step) const {
  for (const auto& r : lane.results)
    if (r->step == step) return r;
  return nullptr;
}

}  // namespace gradpress::server
