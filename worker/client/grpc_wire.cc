#include "worker/client/grpc_wire.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <string_view>

#include "common/error.h"
#include "common/shape.h"
#include "common/timer.h"
#include "transport/wire.h"
#include "worker/client/grpc_calls.h"

namespace gradpress::worker {

bool WriteRawPush(transport::RawCall* call, const proto::PushHeader& header,
                  const std::vector<KeyPush>& pushes) {
  transport::MessageWriter out([call](grpc::ByteBuffer b) { return call->Write(b); });
  out.Header(header);
  for (const KeyPush& p : pushes) {
    const compressors::Payload& payload = p.payload.payload;
    const char* data =
        p.raw.defined() ? static_cast<const char*>(p.raw.data_ptr()) : payload.bytes.data();
    const size_t total = p.raw.defined() ? p.raw.numel() * sizeof(float) : payload.bytes.size();
    std::shared_ptr<const void> keep;  // the tensor's storage, while gRPC holds its bytes
    if (p.raw.defined()) keep = std::make_shared<torch::Tensor>(p.raw);
    proto::TensorChunk meta;
    meta.set_key(p.payload.key);
    meta.set_codec(payload.codec);
    for (int64_t d : payload.shape) meta.add_shape(d);
    meta.set_dtype(static_cast<uint32_t>(payload.dtype));
    if (!out.Payload(meta, data, total, keep)) return false;  // the server ended the call
  }
  return out.Flush();  // false: the server ended the call; Finish() says why
}

proto::PushHeader PushHeaderFor(const ClientOptions& opt, int64_t step, int64_t base_step,
                                std::optional<double> lr, int bucket,
                                const std::vector<proto::WorkerRow>& rows) {
  proto::PushHeader h;
  for (const auto& r : rows) *h.add_rows() = r;
  if (bucket >= 0) h.set_bucket(bucket);
  h.set_worker_id(opt.worker_id);
  h.set_incarnation(opt.incarnation);
  h.set_step(step);
  h.set_base_step(base_step);
  if (lr) h.set_lr(*lr);
  return h;
}

ResultReader::ResultReader(KeyCodecs& codecs, std::vector<torch::Tensor>* out, size_t begin,
                           size_t end, DecodeChecks* later)
    : codecs_(codecs),
      model_(codecs.model()),
      out_(out),
      begin_(begin),
      end_(end),
      later_(later),
      expected_(model_.begin() + begin, model_.begin() + end),
      direct_(model_.size(), kNotDirect),
      assembler_(expected_) {}

bool ResultReader::Read(transport::RawCall* call) {
  grpc::ByteBuffer buffer;
  transport::WireMessage m;
  if (!call->Read(&buffer)) return false;
  transport::ParseMessage(&buffer, &m);
  GP_ENFORCE(m.has_header && header_.ParseFromString(m.header),
             "reply stream must start with a PullHeader");
  transport::ForEachChunk(
      &m, [call](grpc::ByteBuffer* b) { return call->Read(b); },
      [this](const transport::WireChunk& c) { Chunk(c); }, "reply");
  return true;
}

void ResultReader::Chunk(const transport::WireChunk& w) {
  const proto::TensorChunk& c = w.chunk;
  size_t i = begin_;
  while (i < end_ && model_[i].key != c.key()) ++i;
  GP_ENFORCE(i < end_, "server sent unknown key '", c.key(), "'");
  torch::Tensor& o = (*out_)[i];
  const uint64_t size = static_cast<uint64_t>(o.numel()) * sizeof(float);
  const bool can = codecs_.Decoder(c.codec()).IsLossless() && o.device().is_cpu() &&
                   o.scalar_type() == torch::kFloat32 && o.is_contiguous() &&
                   c.total_bytes() == size &&
                   std::vector<int64_t>(c.shape().begin(), c.shape().end()) == model_[i].shape;
  if (c.offset() == 0 && can) direct_[i] = 0;
  if (direct_[i] == kNotDirect) {  // reassembled, decoded at the end
    assembler_.Add(c, w.data);
    return;
  }
  GP_ENFORCE(can && c.offset() == direct_[i] && w.data_size <= size - direct_[i],
             "server sent key '", c.key(), "' out of order (offset ", c.offset(), ")");
  char* dst = static_cast<char*>(o.data_ptr()) + direct_[i];
  for (std::string_view v : w.data) {
    std::memcpy(dst, v.data(), v.size());
    dst += v.size();
  }
  direct_[i] += w.data_size;
  bytes_ += w.data_size;
}

double ResultReader::DecodeRest() {
  Timer t;
  std::vector<compressors::KeyPayload> rest = assembler_.Finish();
  size_t r = 0;
  for (size_t i = begin_; i < end_; ++i) {
    if (direct_[i] != kNotDirect) {
      GP_ENFORCE(direct_[i] == static_cast<uint64_t>((*out_)[i].numel()) * sizeof(float),
                 "server sent ", direct_[i], " bytes of key '", model_[i].key, "'");
      continue;
    }
    GP_ENFORCE(r < rest.size() && rest[r].key == model_[i].key, "server sent no key '",
               model_[i].key, "'");
    codecs_.Decode(i, rest[r++].payload, &(*out_)[i], &bytes_, later_);
  }
  GP_ENFORCE(r == rest.size(), "server sent ", rest.size() - r, " extra keys");
  return t.ElapsedMs();
}

void FillFromHeader(const proto::PullHeader& h, double rpc_ms, StepMetrics* st) {
  st->wait_ms = h.wait_ms();
  st->server_ms = h.server_ms();
  st->server_step = h.step();
  st->contributors = h.contributors();
  st->network_ms = std::max(0.0, rpc_ms - st->wait_ms - st->server_ms);
}

}  // namespace gradpress::worker
