#include "server/model_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/shape.h"
#include "compressors/registry.h"

namespace gradpress::server {

using compressors::Payload;

namespace {

std::vector<float>& Scratch(int64_t n) {
  thread_local std::vector<float> scratch;
  if (static_cast<int64_t>(scratch.size()) < n) scratch.resize(n);
  return scratch;
}

}  // namespace

ModelState::ModelState(const StoreOptions& options, ThreadPool* pool) : opt_(options), pool_(pool) {
  compressors::RegisterBuiltinCompressors();
}

void ModelState::Set(const std::vector<TensorSpec>& model, const std::string& config_hash) {
  Clear();
  model_ = model;
  config_hash_ = config_hash;
  for (size_t i = 0; i < model_.size(); ++i) {
    key_index_[model_[i].key] = i;
    auto k = std::make_unique<KeyState>();
    k->numel = NumelOf(model_[i].shape);
    k->weights.assign(k->numel, 0.f);
    k->accum.assign(k->numel, 0.f);
    k->block_mu.reset(new std::mutex[(k->numel + kBlock - 1) / kBlock + 1]);
    CodecSpec pull = opt_.pull;
    if (!compressors::TravelsCompressed(model_[i].shape, opt_.min_numel, opt_.skip_1d)) {
      pull = {};
    }
    k->pull = compressors::MakeCompressor(pull);
    pull_none_.push_back(k->pull->IsLossless());
    keys_.push_back(std::move(k));
  }
}

void ModelState::Clear() {
  model_.clear();
  key_index_.clear();
  keys_.clear();
  pull_none_.clear();
  config_hash_.clear();
  weights_result_.reset();
}

int64_t ModelState::Index(const std::string& key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? -1 : static_cast<int64_t>(it->second);
}

bool ModelState::PullIsNone(size_t i) const { return pull_none_[i] != 0; }

const compressors::Compressor& ModelState::Decoder(const std::string& codec) {
  std::lock_guard<std::mutex> lock(decoders_mu_);
  auto& d = decoders_[codec];
  if (!d) d = compressors::MakeDecoder(codec);
  return *d;
}

std::vector<const Payload*> ModelState::Validate(const std::vector<KeyPayload>& pushes,
                                                 const Reject& reject) {
  std::vector<const Payload*> ordered(keys_.size(), nullptr);
  try {
    for (const auto& kp : pushes) {
      auto it = key_index_.find(kp.key);
      GP_REFUSE(InvalidArgument, Reason::kBadKeyOrShape, it != key_index_.end(), "unknown key '",
                kp.key, "'");
      GP_REFUSE(InvalidArgument, Reason::kBadKeyOrShape, ordered[it->second] == nullptr, "key '",
                kp.key, "' pushed twice");
      const TensorSpec& spec = model_[it->second];
      GP_REFUSE(InvalidArgument, Reason::kBadKeyOrShape, kp.payload.shape == spec.shape, "key '",
                kp.key, "': shape ", ShapeToString(kp.payload.shape),
                " does not match the model's ", ShapeToString(spec.shape));
      ordered[it->second] = &kp.payload;
    }
    for (size_t i = 0; i < ordered.size(); ++i)
      GP_REFUSE(InvalidArgument, Reason::kBadKeyOrShape, ordered[i] != nullptr,
                "push is missing key '", model_[i].key, "'");
  } catch (const InvalidArgument&) {
    reject("bad_key_or_shape");
    throw;
  }
  // Work items: a whole key for a compressed payload; kBlock-element ranges of a "none"
  // payload, which is read in place (no decode buffer) and split across threads.
  struct Item {
    size_t key;
    int64_t begin, end;
    bool raw;
  };
  std::vector<Item> items;
  for (size_t i = 0; i < ordered.size(); ++i) {
    const int64_t n = keys_[i]->numel;
    bool raw = false;  // the floats themselves: checked in place, no decode
    try {
      raw = Decoder(ordered[i]->codec).IsLossless();
    } catch (const Error& e) {
      reject("undecodable");
      throw InvalidArgument("key '" + model_[i].key + "': payload does not decode: " + e.message(),
                            Reason::kUndecodable);
    }
    if (!raw) {
      items.push_back({i, 0, n, false});
      continue;
    }
    const size_t want = static_cast<size_t>(n) * sizeof(float);
    if (ordered[i]->bytes.size() != want) {
      reject("undecodable");
      throw InvalidArgument(
          "key '" + model_[i].key + "': payload does not decode: " + ordered[i]->codec + ": " +
          std::to_string(ordered[i]->bytes.size()) + " bytes, expected " + std::to_string(want));
    }
    for (int64_t b = 0; b < n; b += kBlock) items.push_back({i, b, std::min(n, b + kBlock), true});
  }
  std::vector<std::string> errors(items.size());
  std::vector<char> non_finite(items.size(), 0);
  pool_->ParallelFor(static_cast<int64_t>(items.size()), [&](int64_t t) {
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
        errors[t] = "key '" + model_[it.key].key + "': payload does not decode: " + e.message();
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
    reject(non_finite[t] ? "non_finite" : "undecodable");
    throw InvalidArgument(errors[t], non_finite[t] ? Reason::kNonFinite : Reason::kUndecodable);
  }
  return ordered;
}

void ModelState::DecodeWeights(const std::vector<const Payload*>& ordered) {
  pool_->ParallelFor(static_cast<int64_t>(keys_.size()), [&](int64_t i) {
    Decoder(ordered[i]->codec)
        .DecodeTo(ordered[i]->bytes, keys_[i]->numel, keys_[i]->weights.data());
  });
}

// Vectorizes: the largest |bits| of the block; NaN and Inf have all exponent bits set.
int64_t ModelState::FirstNonFinite(const float* x, int64_t n) {
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

std::vector<std::tuple<size_t, int64_t, int64_t>> ModelState::Blocks(size_t first,
                                                                     size_t last) const {
  std::vector<std::tuple<size_t, int64_t, int64_t>> blocks;
  for (size_t i = first; i < last; ++i)
    for (int64_t b = 0; b < keys_[i]->numel; b += kBlock)
      blocks.emplace_back(i, b, std::min(keys_[i]->numel, b + kBlock));
  return blocks;
}

std::shared_ptr<const StepResult> ModelState::AsyncWeights(int64_t step) {
  if (!weights_result_ || weights_result_->step != step)
    weights_result_ = Encode(step, true, false, 0, keys_.size(), 1.f, nullptr);
  return weights_result_;
}

std::shared_ptr<StepResult> ModelState::Encode(int64_t step, bool weights, bool lossless,
                                               size_t first, size_t last, float scale,
                                               std::vector<std::string>* spare) {
  auto r = std::make_shared<StepResult>();
  r->step = step;
  const size_t n = last - first;
  r->payloads.resize(n);
  const bool recycle = spare != nullptr && spare->size() == n;
  std::vector<char> copy(n);  // fp32 values: copied block by block below
  for (size_t j = 0; j < n; ++j) {
    const size_t i = first + j;
    KeyPayload& out = r->payloads[j];
    out.key = model_[i].key;
    out.payload.shape = model_[i].shape;
    out.payload.dtype = model_[i].dtype;
    if (recycle) out.payload.bytes = std::move((*spare)[j]);
    copy[j] = lossless || PullIsNone(i);
    out.payload.codec = copy[j] ? "none" : keys_[i]->pull->Name();
    const size_t size = copy[j] ? keys_[i]->numel * sizeof(float) : 0;
    if (out.payload.bytes.size() != size) {  // a recycled buffer of the right size is
      out.payload.bytes.clear();             // overwritten as it is, not zeroed first
      out.payload.bytes.resize(size);
    }
  }
  if (spare) spare->clear();
  if (weights) scale = 1.f;
  const auto blocks = Blocks(first, last);
  pool_->ParallelFor(static_cast<int64_t>(blocks.size()), [&](int64_t b) {
    const auto [i, begin, end] = blocks[b];
    const size_t j = i - first;
    KeyState& k = *keys_[i];
    const float* src = weights ? k.weights.data() : k.accum.data();
    std::string& bytes = r->payloads[j].payload.bytes;
    if (!copy[j]) {  // a whole key per codec call, from its first block's item
      if (begin == 0) k.pull->EncodeTo(src, k.numel, {model_[i].key, step}, &bytes);
      return;
    }
    float* dst = reinterpret_cast<float*>(bytes.data());
    if (scale == 1.f) {
      std::memcpy(dst + begin, src + begin, (end - begin) * sizeof(float));
    } else {
      for (int64_t e = begin; e < end; ++e) dst[e] = src[e] * scale;
    }
  });
  return r;
}

void ModelState::Save(Checkpoint* c) const {
  for (size_t i = 0; i < model_.size(); ++i) {
    const KeyState& k = *keys_[i];
    const std::string& key = model_[i].key;
    c->Put("weights/" + key, FloatBytes(k.weights.data(), k.weights.size()));
    c->Put("momentum/" + key,
           FloatBytes(k.sgd.momentum_buffer.data(), k.sgd.momentum_buffer.size()));
    std::string pull;
    k.pull->SaveState(&pull);
    c->Put("pull/" + key, std::move(pull));
  }
}

void ModelState::Load(const Checkpoint& c, const std::string& context) {
  for (size_t i = 0; i < model_.size(); ++i) {
    KeyState& k = *keys_[i];
    const std::string& key = model_[i].key;
    std::vector<float> weights = BytesToFloats(c.Get("weights/" + key), context + " " + key);
    GP_ENFORCE(static_cast<int64_t>(weights.size()) == k.numel, context, ": key '", key, "' has ",
               weights.size(), " weights, its shape ", k.numel);
    std::vector<float> momentum =
        BytesToFloats(c.Get("momentum/" + key), context + " momentum " + key);
    GP_ENFORCE(momentum.empty() || static_cast<int64_t>(momentum.size()) == k.numel, context,
               ": key '", key, "' has ", momentum.size(), " momentum values, its shape ", k.numel);
    k.pull->LoadState(c.Get("pull/" + key));
    k.weights = std::move(weights);
    k.sgd.momentum_buffer = std::move(momentum);
  }
}

}  // namespace gradpress::server
