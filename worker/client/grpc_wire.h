#pragma once
// GrpcPsClient's side of the one wire path (transport/wire.h, transport/raw_client.h):
// pushes framed straight from tensor memory or codec payloads, and reply streams read into the
// output tensors. Used by grpc_tensor_calls.cc. Not part of the public API.
// Thread-safety: values; one per call.
#include <grpcpp/support/byte_buffer.h>
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "common/error.h"
#include "proto/gradpress.grpc.pb.h"
#include "transport/chunks.h"
#include "transport/raw_client.h"
#include "transport/status.h"
#include "transport/wire.h"
#include "worker/client/client_options.h"
#include "worker/client/key_codecs.h"
#include "worker/client/step_metrics.h"

namespace gradpress::worker {

// Writes the push stream: the header and every key's chunks, small payloads gathered into one
// message (a raw tensor's memory referred to by the gRPC slices: no copy before the kernel's);
// stops early (false) once the server has ended the call.
bool WriteRawPush(transport::RawCall* call, const proto::PushHeader& header,
                  const std::vector<KeyPush>& pushes);

// The push stream's header; rows: the dashboard's rows it carries.
proto::PushHeader PushHeaderFor(const ClientOptions& opt, int64_t step, int64_t base_step,
                                std::optional<double> lr, int bucket = -1,
                                const std::vector<proto::WorkerRow>& rows = {});

// Reads a reply stream: a PullHeader and chunks. Lossless payloads for CPU float32
// contiguous tensors are copied from the received slices straight into `out`; the others
// are reassembled and decoded once the stream has ended (DecodeRest).
class ResultReader {
 public:
  // Expects the keys [begin, end) of the codecs' model (a bucket, or the whole model).
  // later: device decodes are checked there (DeviceCodecs::Decode), not waited for.
  ResultReader(KeyCodecs& codecs, std::vector<torch::Tensor>* out, size_t begin, size_t end,
               DecodeChecks* later = nullptr);
  // False if the stream ended before its header (the call's status says why).
  bool Read(transport::RawCall* call);
  // Checks every key arrived whole and decodes the reassembled ones into out; decode ms.
  double DecodeRest();
  const proto::PullHeader& header() const { return header_; }
  uint64_t bytes() const { return bytes_; }  // payload bytes received

 private:
  void Chunk(const transport::WireChunk& c);
  static constexpr uint64_t kNotDirect = ~uint64_t{0};
  KeyCodecs& codecs_;
  const std::vector<TensorSpec>& model_;
  std::vector<torch::Tensor>* out_;
  size_t begin_, end_;
  DecodeChecks* later_;
  std::vector<TensorSpec> expected_;  // model[begin, end): the assembler points into it
  proto::PullHeader header_;
  std::vector<uint64_t> direct_;  // per key: bytes copied into out (kNotDirect: reassembled)
  transport::PayloadAssembler assembler_;
  uint64_t bytes_ = 0;
};

// A request message as one raw frame (its serialized bytes).
template <typename Message>
grpc::ByteBuffer RequestMessage(const Message& msg) {
  grpc::ByteBuffer buffer;
  bool own = false;
  GP_ENFORCE_AS(Internal, grpc::SerializationTraits<Message>::Serialize(msg, &buffer, &own).ok(),
                "cannot serialize a request");
  return buffer;
}

// The one reply of a client-streaming call (after WritesDone); throws the call's error.
template <typename Message>
Message ReadReply(transport::RawCall* call, const char* what) {
  grpc::ByteBuffer buffer;
  Message msg;
  const bool got = call->Read(&buffer);
  transport::ThrowIfError(call->Finish(), what);
  GP_ENFORCE(got && grpc::SerializationTraits<Message>::Deserialize(&buffer, &msg).ok(), what,
             ": malformed reply");
  return msg;
}

// Step statistics from a reply's header and the call's duration.
void FillFromHeader(const proto::PullHeader& h, double rpc_ms, StepMetrics* st);

}  // namespace gradpress::worker
