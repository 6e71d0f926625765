#pragma once
// Payloads on the wire: each key's payload is cut into TensorChunk messages of at most
// kChunkBytes, and reassembled on the other side with every field checked. Shared by the
// server's service adapter and the worker's client.
//
//   PayloadAssembler a(model);
//   for (const WireChunk& c : m.chunks) a.Add(c.chunk, c.data);  // m: a transport::WireMessage
//   std::vector<KeyPayload> kps = a.Finish();
// (Senders frame payloads with transport/wire.h's MessageWriter.)
//
// Thread-safety: values; one assembler per stream.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "compressors/compressor.h"
#include "proto/gradpress.pb.h"

namespace gradpress::transport {

using compressors::KeyPayload;
using compressors::TensorSpec;

// 2 MiB: well under gRPC's 4 MiB default message limit with framing (measured: 1 MiB
// chunks move 0.77 GB/s, 2 MiB 0.95 GB/s on loopback; 3 MiB no better).
constexpr size_t kChunkBytes = 2 << 20;

// Largest payload accepted for a key: what any codec may produce for it (8 bytes per
// element plus headers), so a hostile total_bytes cannot make the receiver allocate more.
uint64_t MaxPayloadBytes(int64_t numel);

class PayloadAssembler {
 public:
  // model: the keys expected and their shapes; chunks for other keys are refused.
  explicit PayloadAssembler(const std::vector<TensorSpec>& model);
  // Throws InvalidArgument naming the key for: unknown key, shape or codec differing from
  // the key's first chunk, offset not where the previous chunk ended, size past total_bytes
  // or past MaxPayloadBytes.
  // `data`: the chunk's data bytes, in order (views; copied).
  void Add(const proto::TensorChunk& meta, const std::vector<std::string_view>& data);
  // Every started key complete; payloads in arrival order of their first chunk.
  std::vector<KeyPayload> Finish();

 private:
  std::map<std::string, const TensorSpec*> specs_;
  std::map<std::string, size_t> index_;
  std::vector<KeyPayload> out_;
  std::vector<uint64_t> total_;
};

void ToProto(const TensorSpec& spec, proto::TensorSpec* out);
TensorSpec FromProto(const proto::TensorSpec& spec);

}  // namespace gradpress::transport
