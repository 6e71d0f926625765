// gradpress-fuzz-push: raw push streams, parsed and validated as the server does, against a
// real ParameterStore holding a small registered model.
//
// Input: [options][slice cut] then records ([u16 length][bytes], fuzz_util.h), each one raw
// gRPC message; a boundary record ends a stream (at most kStreams per input).
//   options bits 0-1, the path:
//     0  PushPull (sync, gradients): server::ReadPushStream, wait for the result
//     1  Push (sync, exchange=weights): server::ReadPushStream without waiting
//     2  PushPull (async, exchange=weights)
//     3  InitWeights: server::ReadWholePush (ParseMessage -> PayloadAssembler) -> InitWeights
//   bit 2: the pull codec is topk+qsgd with error feedback (else none); bit 3: shadow weights.
// Paths 0-2 run the service's own push path, server::ReadPushStream (server/parameter_service.h:
// ParseMessage -> BeginPush -> Add pieces -> Commit), fed the stream's frames; path 3 runs
// the service's whole-push reader, server::ReadWholePush, on them. Oracles besides the sanitizers:
// only gradpress::Error may be thrown; a message both ParseMessage and protobuf accept means the
// same to both; a step result the store returns frames, parses back and decodes with its own codec;
// a rejected stream leaves the step.
#include <google/protobuf/stubs/common.h>
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/error.h"
#include "compressors/registry.h"
#include "fuzz/fuzz_util.h"
#include "proto/gradpress.pb.h"
#include "server/parameter_service.h"
#include "server/parameter_store.h"
#include "transport/chunks.h"
#include "transport/wire.h"

namespace gradpress::fuzz {
namespace {

using compressors::KeyPayload;
using compressors::TensorSpec;
using server::Clock;
using server::ParameterStore;

constexpr int kStreams = 4;
const server::WorkerId kWorker{"worker-0", 1};

const std::vector<TensorSpec>& Model() {
  static const std::vector<TensorSpec> model = {
      {"layer0", {2000}}, {"layer1", {3, 5}}, {"layer2", {7}}};
  return model;
}

// A raw gRPC message of `bytes`, as `cut` slices split at fuzz-chosen points (gRPC hands a
// received message over as any number of slices; the parser must not care).
inline grpc::ByteBuffer ToByteBuffer(std::string_view bytes, uint8_t cut) {
  std::vector<grpc::Slice> slices;
  const size_t pieces = 1 + cut % 4;
  size_t at = 0;
  for (size_t i = 0; i < pieces; ++i) {
    const size_t end = i + 1 == pieces ? bytes.size() : at + (bytes.size() - at) * (cut >> 4) / 16;
    slices.emplace_back(bytes.data() + at, end - at);
    at = end;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

// The bytes of a raw gRPC message.
inline std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  if (!b.Dump(&slices).ok()) std::abort();
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "gradpress-fuzz-push: oracle failed: %s\n", what);
  std::abort();
}

server::StoreOptions Options(uint8_t options) {
  server::StoreOptions o;
  o.workers = 1;
  o.threads = 1;
  o.stats_every = 0;
  o.worker_timeout_s = 60;
  const int path = options & 3;
  o.exchange_weights = path == 1 || path == 2;
  o.async = path == 2;
  o.shadow_weights = (options & 8) && !o.exchange_weights;
  if (options & 4) {
    o.pull.codec = "topk";
    o.pull.then = std::make_shared<CodecSpec>();
    o.pull.then->codec = "qsgd";
    o.pull.error_feedback = true;
  }
  return o;
}

std::vector<KeyPayload> NonePayloads(const std::vector<std::vector<float>>& values) {
  auto none = compressors::MakeDecoder("none");
  std::vector<KeyPayload> out;
  for (size_t i = 0; i < Model().size(); ++i) {
    const auto& v = values[i];
    out.push_back({Model()[i].key,
                   {"none", Model()[i].shape, compressors::DType::kFloat32,
                    none->EncodeBytes(v.data(), static_cast<int64_t>(v.size()))}});
  }
  return out;
}

// Both parsers accepted `bytes`: they must agree on what it holds.
void CheckAgainstProtobuf(std::string_view bytes, const transport::WireMessage& m) {
  proto::PushMessage pm;
  if (!pm.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) return;
  if (m.has_header) {
    proto::PushHeader h;
    if (!h.ParseFromString(m.header)) return;
    if (!pm.has_header() || pm.header().SerializeAsString() != h.SerializeAsString())
      Fail("ParseMessage and protobuf disagree on a header");
  } else if (pm.has_header()) {
    Fail("protobuf found a header, ParseMessage none");
  }
  if (static_cast<size_t>(pm.chunk_size()) != m.chunks.size())
    Fail("ParseMessage and protobuf disagree on the number of chunks");
  for (size_t i = 0; i < m.chunks.size(); ++i) {
    proto::TensorChunk c = pm.chunk(static_cast<int>(i));
    std::string data;
    for (auto piece : m.chunks[i].data) data.append(piece);
    if (c.data() != data || data.size() != m.chunks[i].data_size)
      Fail("ParseMessage and protobuf disagree on chunk data");
    c.clear_data();
    if (c.SerializeAsString() != m.chunks[i].chunk.SerializeAsString())
      Fail("ParseMessage and protobuf disagree on chunk fields");
  }
}

// A result the store hands out must travel: framed, parsed back, decoded by its codec.
void CheckResult(const server::StepResult& r) {
  if (r.payloads.size() != Model().size()) Fail("result has the wrong number of keys");
  // Every payload through one writer (gathered as the service sends them), parsed back.
  auto keep = std::make_shared<int>(0);
  std::map<std::string, std::string> back;
  proto::PullHeader h;
  h.set_step(r.step);
  transport::MessageWriter w([&](grpc::ByteBuffer b) {
    transport::WireMessage m;
    transport::ParseMessage(&b, &m);
    for (const transport::WireChunk& c : m.chunks) {
      std::string& bytes = back[c.chunk.key()];
      if (c.chunk.offset() != bytes.size()) Fail("a framed result chunk is out of order");
      for (auto piece : c.data) bytes.append(piece);
    }
    return true;
  });
  w.Header(h);
  for (const KeyPayload& kp : r.payloads) {
    proto::TensorChunk meta;
    meta.set_key(kp.key);
    meta.set_codec(kp.payload.codec);
    for (int64_t d : kp.payload.shape) meta.add_shape(d);
    w.Payload(meta, kp.payload.bytes.data(), kp.payload.bytes.size(), keep);
  }
  w.Flush();
  for (size_t i = 0; i < r.payloads.size(); ++i) {
    const KeyPayload& kp = r.payloads[i];
    if (back[kp.key] != kp.payload.bytes) Fail("a framed result's bytes differ");
    std::vector<float> out(Numel(Model()[i].shape));
    try {
      compressors::MakeDecoder(kp.payload.codec)
          ->DecodeTo(kp.payload.bytes, static_cast<int64_t>(out.size()), out.data());
    } catch (const Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      Fail("the store's own result does not decode");
    }
  }
}

// The records of one stream: up to a boundary or the end of the input.
std::vector<std::string_view> Stream(FuzzInput& in) {
  std::vector<std::string_view> records;
  for (auto r = in.Next(); r && !r->boundary; r = in.Next()) records.push_back(r->bytes);
  return records;
}

// A stream's records as the frames gRPC would hand the service, each split into slices at
// `cut`; each frame is also parsed here for the protobuf oracle.
class RecordFrames : public server::PushFrameReader {
 public:
  RecordFrames(const std::vector<std::string_view>& records, uint8_t cut)
      : records_(records), cut_(cut) {}
  bool Read(grpc::ByteBuffer* frame) override {
    if (next_ == records_.size()) return false;
    const std::string_view bytes = records_[next_++];
    grpc::ByteBuffer copy = ToByteBuffer(bytes, cut_);
    transport::WireMessage m;
    try {
      transport::ParseMessage(&copy, &m);
      CheckAgainstProtobuf(bytes, m);
    } catch (const Error&) {  // the service's own parse refuses it the same way
    }
    *frame = ToByteBuffer(bytes, cut_);
    return true;
  }

 private:
  const std::vector<std::string_view>& records_;
  const uint8_t cut_;
  size_t next_ = 0;
};

// The service's push path (ParameterService::StreamPush calls the same function).
void StreamPush(ParameterStore& store, const std::vector<std::string_view>& records, uint8_t cut,
                bool wait) {
  if (records.empty()) return;
  RecordFrames frames(records, cut);
  const auto deadline = Clock::now() + std::chrono::seconds(2);
  server::PushPullResult r = server::ReadPushStream(&store, &frames, deadline, wait);
  if (r.result) CheckResult(*r.result);
}

// The service's InitWeights path: server::ReadWholePush over the stream's frames, then the
// store's InitWeights.
void InitWeights(ParameterStore& store, const std::vector<std::string_view>& records, uint8_t cut) {
  if (records.empty()) return;
  RecordFrames frames(records, cut);
  const server::WholePush push = server::ReadWholePush(&frames, store.model());
  if (store.InitWeights({push.header.worker_id(), push.header.incarnation()}, push.payloads))
    CheckResult(*store.Weights(kWorker));
}

// --- seeds: valid streams made by the project's encoders -----------------------------------

proto::PushHeader Header(int64_t step, int64_t base_step, bool lr) {
  proto::PushHeader h;
  h.set_worker_id(kWorker.name);
  h.set_incarnation(kWorker.incarnation);
  h.set_step(step);
  h.set_base_step(base_step);
  if (lr) h.set_lr(0.05);
  return h;
}

// One push of every key encoded with `codec`: each payload in `pieces` chunks of its own
// message after a header message, or (pieces 0) gathered as the client sends them
// (transport::MessageWriter: the header and every chunk in one message).
void PutPush(const std::string& codec, int64_t step, int pieces, bool lr, std::string* out) {
  transport::MessageWriter gathered([out](grpc::ByteBuffer b) {
    PutRecord(Flatten(std::move(b)), out);
    return true;
  });
  if (pieces == 0)
    gathered.Header(Header(step, step, lr));
  else
    PutRecord(Flatten(transport::FrameHeader(Header(step, step, lr))), out);
  for (size_t i = 0; i < Model().size(); ++i) {
    const TensorSpec& s = Model()[i];
    auto c = compressors::MakeCompressor(ParseCodecShorthand(codec));
    const int64_t n = Numel(s.shape);
    const auto x = Floats(n, static_cast<uint32_t>(step * 10 + i));
    const std::string bytes = c->EncodeBytes(x.data(), n, {s.key, step});
    proto::TensorChunk meta;
    meta.set_key(s.key);
    meta.set_codec(c->Name());
    for (int64_t d : s.shape) meta.add_shape(d);
    if (pieces == 0) {
      gathered.Payload(meta, bytes.data(), bytes.size(), nullptr);
      continue;
    }
    meta.set_total_bytes(bytes.size());
    const size_t each = bytes.size() / pieces + 1;
    size_t at = 0;
    do {
      const size_t len = std::min(each, bytes.size() - at);
      meta.set_offset(at);
      PutRecord(Flatten(transport::FrameChunk(meta, bytes.data() + at, len)), out);
      at += len;
    } while (at < bytes.size());
  }
  gathered.Flush();
}

void WriteSeeds(Seeds& seeds) {
  const std::vector<std::string> codecs = {"none",
                                           "fp16",
                                           "int8",
                                           "qsgd levels=16",
                                           "terngrad",
                                           "onebit",
                                           "signum",
                                           "topk ratio=0.05",
                                           "randomk ratio=0.05",
                                           "threshold threshold=0.5",
                                           "gaussiank ratio=0.05",
                                           "dgc ratio=0.05",
                                           "powersgd rank=2",
                                           "topk ratio=0.05 then=qsgd"};
  int k = 0;
  for (const auto& codec : codecs) {
    for (uint8_t options : {0, 1, 2, 4, 8, 13}) {
      std::string s;
      s.push_back(static_cast<char>(options));
      s.push_back(static_cast<char>(k * 37));  // slice cut
      PutPush(codec, 0, 1 + k % 3, options & 1, &s);
      PutBoundary(&s);
      PutPush(codec, options & 2 ? 1 : 0, 1, false, &s);  // a duplicate, or async's next
      PutBoundary(&s);
      PutPush(codec, 1, k % 2 ? 2 : 0, false, &s);  // sync's next step
      seeds.Write("push-" + std::to_string(k++), s);
    }
    std::string s;  // InitWeights: the same records, through the whole-push reader
    s.push_back(3);
    s.push_back(0);
    PutPush(codec, 0, 2, false, &s);
    seeds.Write("push-" + std::to_string(k++), s);
  }
}

}  // namespace
}  // namespace gradpress::fuzz

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  using namespace gradpress::fuzz;
  gradpress::compressors::RegisterBuiltinCompressors();
  google::protobuf::SetLogHandler(nullptr);
  Initialize(argc, argv, WriteSeeds);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace gradpress::fuzz;
  FuzzInput in(data, size);
  const uint8_t options = in.Byte();
  const uint8_t cut = in.Byte();
  ParameterStore store(Options(options));
  store.Register(kWorker, Model(), "job");
  if ((options & 3) == 3) {
    try {
      const std::vector<std::string_view> records = Stream(in);
      InitWeights(store, records, cut);
    } catch (const gradpress::Error&) {
    }
    return 0;
  }
  std::vector<std::vector<float>> zeros;
  for (const auto& s : Model()) zeros.emplace_back(Numel(s.shape), 0.f);
  store.InitWeights(kWorker, NonePayloads(zeros));
  for (int i = 0; i < kStreams && in.left() > 0; ++i) {
    const int64_t step = store.step();
    const auto records = Stream(in);
    try {
      StreamPush(store, records, cut, (options & 3) != 1);
    } catch (const gradpress::Error&) {
      if (store.step() != step) Fail("a rejected push changed the server step");
    }
  }
  return 0;
}
