#pragma once
// Chunk messages as raw gRPC byte buffers, so tensor bytes are never copied through protobuf
// strings: the sender frames a chunk around its data (one copy into a gRPC slice, or none
// for memory the slice may hold a reference to), the receiver reads the data as views of
// the received slices. The bytes on the wire are exactly a serialized PushMessage or
// PullMessage (field numbers taken from the generated code), so either end may still use the
// generated protobuf types.
//
//   grpc::ByteBuffer b = FrameChunk(meta, data, n);              // meta: TensorChunk, no data
//   WireMessage m;  ParseMessage(&b, &m);                         // m.chunk, m.data (views)
//   for (std::string_view piece : m.data) ...;                     // valid while m lives
//
// ParseMessage throws InvalidArgument on malformed bytes (truncated varints or fields, a
// length past the end, group wire types, two data fields). Thread-safety: values.
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

// One PushMessage / PullMessage: a header (serialized, to be parsed by the caller with the
// matching type) or a chunk whose data are views into `slices`.
struct WireMessage {
  bool has_header = false;
  std::string header;  // serialized PushHeader / PullHeader when has_header
  bool has_chunk = false;
  proto::TensorChunk chunk;            // every field but data
  std::vector<std::string_view> data;  // the chunk's data bytes, in order, views of slices
  size_t data_size = 0;                // total bytes in `data`
  std::vector<grpc::Slice> slices;     // keeps the views alive
};

// Parses a serialized PushMessage or PullMessage. `buffer` is consumed.
void ParseMessage(grpc::ByteBuffer* buffer, WireMessage* out);

// A serialized {PushMessage,PullMessage}.chunk = meta with data = [data, data + n), the
// data copied once into a gRPC slice. meta.data() must be empty.
grpc::ByteBuffer FrameChunk(const proto::TensorChunk& meta, const char* data, size_t n);
// The same, with the data not copied: the slice refers to [data, data + n) and holds
// `keep_alive` until gRPC is done with the bytes.
grpc::ByteBuffer FrameChunk(const proto::TensorChunk& meta, const char* data, size_t n,
                            std::shared_ptr<const void> keep_alive);
// Frames a whole payload [data, data + total) as chunks of at most kChunkBytes (one empty
// chunk for an empty payload): meta's fields, total_bytes and offset set on each. With
// keep_alive the slices refer to the data, else they copy it. Stops, returning false, at the
// first emit that returns false (the stream is gone).
bool ForEachFrame(proto::TensorChunk meta, const char* data, size_t total,
                  const std::shared_ptr<const void>& keep_alive,
                  const std::function<bool(grpc::ByteBuffer)>& emit);
// A serialized message with just its header field (1) set to `header`.
grpc::ByteBuffer FrameHeader(const google::protobuf::MessageLite& header);

}  // namespace gradpress::transport
