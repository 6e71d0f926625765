#include "transport/chunks.h"

#include <algorithm>

#include "common/error.h"
#include "common/shape.h"

namespace gradpress::transport {

uint64_t MaxPayloadBytes(int64_t numel) { return 8 * static_cast<uint64_t>(numel) + 4096; }

PayloadAssembler::PayloadAssembler(const std::vector<TensorSpec>& model) {
  for (const auto& s : model) specs_[s.key] = &s;
}

void PayloadAssembler::Add(const proto::TensorChunk& meta,
                           const std::vector<std::string_view>& data) {
  const proto::TensorChunk* c = &meta;
  size_t size = 0;
  for (std::string_view v : data) size += v.size();
  const std::string& key = c->key();
  auto spec = specs_.find(key);
  GP_ENFORCE(spec != specs_.end(), "unknown key '", key, "'");
  std::vector<int64_t> shape(c->shape().begin(), c->shape().end());
  auto it = index_.find(key);
  if (it == index_.end()) {
    GP_ENFORCE(c->offset() == 0, "key '", key, "': first chunk starts at offset ", c->offset());
    GP_ENFORCE(c->total_bytes() <= MaxPayloadBytes(NumelOf(spec->second->shape)), "key '", key,
               "': payload of ", c->total_bytes(), " bytes is larger than any codec produces");
    GP_ENFORCE(c->dtype() <= 3, "key '", key, "': unknown dtype code ", c->dtype());
    it = index_.emplace(key, out_.size()).first;
    KeyPayload kp;
    kp.key = key;
    kp.payload.codec = c->codec();
    kp.payload.shape = std::move(shape);
    kp.payload.dtype = static_cast<compressors::DType>(c->dtype());
    kp.payload.bytes.reserve(c->total_bytes());
    out_.push_back(std::move(kp));
    total_.push_back(c->total_bytes());
  } else {
    const KeyPayload& kp = out_[it->second];
    GP_ENFORCE(c->codec() == kp.payload.codec && shape == kp.payload.shape &&
                   c->total_bytes() == total_[it->second],
               "key '", key, "': chunk disagrees with the key's first chunk");
    GP_ENFORCE(c->offset() == kp.payload.bytes.size(), "key '", key, "': chunk at offset ",
               c->offset(), ", expected ", kp.payload.bytes.size());
  }
  std::string& bytes = out_[it->second].payload.bytes;
  GP_ENFORCE(bytes.size() + size <= total_[it->second], "key '", key,
             "': chunks exceed total_bytes ", total_[it->second]);
  for (std::string_view v : data) bytes.append(v);
}

std::vector<KeyPayload> PayloadAssembler::Finish() {
  for (size_t i = 0; i < out_.size(); ++i) {
    GP_ENFORCE(out_[i].payload.bytes.size() == total_[i], "key '", out_[i].key, "': got ",
               out_[i].payload.bytes.size(), " of ", total_[i], " payload bytes");
  }
  index_.clear();
  total_.clear();
  return std::move(out_);
}

void ToProto(const TensorSpec& spec, proto::TensorSpec* out) {
  out->set_key(spec.key);
  for (int64_t d : spec.shape) out->add_shape(d);
  out->set_dtype(static_cast<uint32_t>(spec.dtype));
}

TensorSpec FromProto(const proto::TensorSpec& spec) {
  GP_ENFORCE(spec.dtype() <= 3, "key '", spec.key(), "': unknown dtype code ", spec.dtype());
  return {spec.key(), std::vector<int64_t>(spec.shape().begin(), spec.shape().end()),
          static_cast<compressors::DType>(spec.dtype())};
}

}  // namespace gradpress::transport
