#include "server/model_state.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "common/error.h"
#include "common/shape.h"
#include "compressors/registry.h"
#include "server/payload_check.h"

namespace gradpress::server {

using compressors::Payload;

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
  // The checks of a streamed push (server/payload_check.h), each payload taken as one piece.
  const PayloadCheck check(this, /*sparse=*/false);
  std::vector<PayloadIn> in(keys_.size());
  std::vector<const Payload*> ordered(keys_.size(), nullptr);
  try {
    for (const auto& kp : pushes) {
      const size_t i = check.Index(kp.key);
      const Payload& p = kp.payload;
      PayloadPiece piece{kp.key, p.codec, p.shape};  // the whole payload, at offset 0
      piece.dtype = static_cast<uint32_t>(p.dtype);
      piece.total_bytes = p.bytes.size();
      check.Piece(i, piece, p.bytes.size(), &in[i]);
      in[i].got = p.bytes.size();
      ordered[i] = &p;
    }
    for (size_t i = 0; i < keys_.size(); ++i) check.Complete(i, in[i]);
    // Work items: a whole key for a coded payload (decoded to be checked, not kept);
    // kBlock-element ranges of a raw one, checked in place and split across threads.
    struct Item {
      size_t key;
      int64_t begin, end;
    };
    std::vector<Item> items;
    for (size_t i = 0; i < keys_.size(); ++i) {
      const int64_t n = keys_[i]->numel;
      if (!in[i].raw) {
        items.push_back({i, 0, n});
        continue;
      }
      for (int64_t b = 0; b < n; b += kBlock) items.push_back({i, b, std::min(n, b + kBlock)});
    }
    ForEachChecked(pool_, static_cast<int64_t>(items.size()), [&](int64_t t) {
      const Item& it = items[t];
      const std::string_view bytes = ordered[it.key]->bytes;
      if (!in[it.key].raw) return check.Decode(it.key, bytes, &in[it.key], nullptr);
      const size_t at = it.begin * sizeof(float), len = (it.end - it.begin) * sizeof(float);
      check.Raw(it.key, at, bytes.substr(at, len), nullptr);
    });
  } catch (const InvalidArgument& e) {
    reject(ReasonName(e.reason()));
    throw;
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

std::shared_ptr<StepResult> ModelState::EncodeMomentum(int64_t step) const {
  auto r = std::make_shared<StepResult>();
  r->step = step;
  r->payloads.resize(model_.size());
  for (size_t i = 0; i < model_.size(); ++i) {
    const std::vector<float>& m = keys_[i]->sgd.momentum_buffer;
    if (static_cast<int64_t>(m.size()) != keys_[i]->numel) return nullptr;
    KeyPayload& out = r->payloads[i];
    out.key = model_[i].key;
    out.payload.shape = model_[i].shape;
    out.payload.dtype = model_[i].dtype;
    out.payload.codec = "none";
    out.payload.bytes.assign(reinterpret_cast<const char*>(m.data()), m.size() * sizeof(float));
  }
  return r;
}

std::shared_ptr<const StepResult> ModelState::AsyncWeights(int64_t step) const {
  return weights_result_ && weights_result_->step == step ? weights_result_ : nullptr;
}

std::shared_ptr<const StepResult> ModelState::KeepAsyncWeights(
    std::shared_ptr<const StepResult> r) {
  std::swap(weights_result_, r);
  return r;
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
