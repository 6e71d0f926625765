#pragma once
// Stream messages as raw gRPC byte buffers, so tensor bytes are never copied through protobuf
// strings: the sender frames chunks around their data (one copy into a gRPC slice, or none
// for memory the slice may hold a reference to), the receiver reads the data as views of
// the received slices. The bytes on the wire are exactly a serialized PushMessage or
// PullMessage (field numbers taken from the generated code), so either end may still use the
// generated protobuf types. A message holds the stream's header (the first message only) and
// any number of chunks: MessageWriter gathers a call's small payloads into one message.
//
//   MessageWriter w([&](grpc::ByteBuffer b) { return stream->Write(b); });
//   w.Header(header);                                   // PushHeader / PullHeader
//   for (...) w.Payload(meta, data, n, keep_alive);     // meta: TensorChunk, no data
//   w.Flush();
//   WireMessage m;  ParseMessage(&b, &m);               // m.header, m.chunks[i].data (views)
//   for (std::string_view piece : m.chunks[0].data) ...; // valid while m lives
//
// ParseMessage throws InvalidArgument on malformed bytes (truncated varints or fields, a
// length past the end, group wire types, two data fields in a chunk, two headers).
// Thread-safety: values; a MessageWriter is one stream's.
#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "proto/gradpress.pb.h"

namespace gradpress::transport {

// One chunk of a message: every field but data, and the data as views of the message's slices.
struct WireChunk {
  proto::TensorChunk chunk;
  std::vector<std::string_view> data;  // in order
  size_t data_size = 0;                // total bytes in `data`
};

// One PushMessage / PullMessage: a header (serialized, to be parsed by the caller with the
// matching type) and chunks whose data are views into `slices`.
struct WireMessage {
  bool has_header = false;
  std::string header;               // serialized PushHeader / PullHeader when has_header
  std::vector<WireChunk> chunks;    // in stream order
  std::vector<grpc::Slice> slices;  // keeps the views alive
};

// Parses a serialized PushMessage or PullMessage. `buffer` is consumed.
void ParseMessage(grpc::ByteBuffer* buffer, WireMessage* out);

// Every chunk of a stream, in order: those of `first` (parsed; the caller took its header),
// then those of each message `read` yields until it returns false. A later message with a
// header throws InvalidArgument ("<what> stream has a second header").
void ForEachChunk(WireMessage* first, const std::function<bool(grpc::ByteBuffer*)>& read,
                  const std::function<void(const WireChunk&)>& chunk, const char* what);

// A stream's messages: the header, then payloads cut into chunks of at most kChunkBytes
// (transport/chunks.h; one empty chunk for an empty payload), gathered into messages of at
// most kChunkBytes of data. Emit returns false once the stream is gone.
class MessageWriter {
 public:
  using Emit = std::function<bool(grpc::ByteBuffer)>;
  explicit MessageWriter(Emit emit) : emit_(std::move(emit)) {}
  // The stream's header: call first, once.
  void Header(const google::protobuf::MessageLite& header);
  // Frames [data, data + total): meta's fields, total_bytes and offset set on each chunk
  // (meta.data() empty). With keep_alive the slices refer to the data, else they copy it.
  // False, and nothing more is sent, once an emit returned false.
  bool Payload(proto::TensorChunk meta, const char* data, size_t total,
               const std::shared_ptr<const void>& keep_alive);
  // Sends what is gathered (a header alone included); false if the stream is gone.
  bool Flush();

 private:
  Emit emit_;
  std::vector<grpc::Slice> slices_;  // the message being gathered
  size_t data_bytes_ = 0;            // chunk data in it
  bool failed_ = false;
};

// A serialized {PushMessage,PullMessage} with one chunk = meta with data = [data, data + n),
// the data copied once into a gRPC slice. meta.data() must be empty.
grpc::ByteBuffer FrameChunk(const proto::TensorChunk& meta, const char* data, size_t n);
// A serialized message with just its header field (1) set to `header`.
grpc::ByteBuffer FrameHeader(const google::protobuf::MessageLite& header);

}  // namespace gradpress::transport
