// Protocol compatibility (docs/protocol.md): the released schema (tests/proto/gradpress_v0.proto,
// proto/gradpress.proto before 4d6d5ce) against the current one.
// - The rule, checked on the descriptors: every released message, field, enum value and RPC is
//   still there with its number, name and type; only the listed, wire-compatible exceptions.
// - Old bytes, current reader: every released message, each field set, parses with the current
//   type and re-serializes to what the old schema reads back equal; old push and reply streams
//   (a header message, then one chunk per message) go through the server's own reader.
// - Current bytes, old reader: what the old schema can express (one chunk per message) is read
//   equal, and the current fields it does not know survive its parse and serialize.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/dynamic_message.h>
#include <google/protobuf/message.h>
#include <google/protobuf/util/message_differencer.h>
#include <grpcpp/support/byte_buffer.h>

#include <catch2/catch.hpp>
#include <memory>
#include <set>
#include <string>

#include "proto/gradpress.pb.h"
#include "tests/proto/gradpress_v0.pb.h"
#include "transport/wire.h"

namespace gradpress::testing {
namespace {

namespace pb = google::protobuf;
namespace v0 = gradpress::proto_v0;
using FD = pb::FieldDescriptor;

const pb::FileDescriptor* OldFile() { return v0::PushMessage::descriptor()->file(); }
const pb::FileDescriptor* NewFile() { return proto::PushMessage::descriptor()->file(); }

// The changes the rule allows on an existing field, each wire-compatible. Singular -> repeated
// of a length-delimited type (4d6d5ce): an old reader keeps the last element of a message that
// has several, so a writer that talks to old readers sends one per message.
const std::set<std::string> kSingularToRepeated = {"PushMessage.chunk", "PullMessage.chunk"};

bool IsReserved(const pb::Descriptor* d, const FD* old_field) {
  return d->IsReservedNumber(old_field->number()) && d->IsReservedName(old_field->name());
}

std::string Name(const FD* f) { return f->containing_type()->name() + "." + f->name(); }

// An enum's breaches: removed (ne null), or a value number removed or renamed.
void EnumBreaches(const pb::EnumDescriptor* oe, const pb::EnumDescriptor* ne,
                  const std::string& scope, std::vector<std::string>* out) {
  if (!ne) {
    out->push_back("enum " + scope + oe->name() + " removed");
    return;
  }
  for (int k = 0; k < oe->value_count(); ++k) {
    const pb::EnumValueDescriptor* nv = ne->FindValueByNumber(oe->value(k)->number());
    if (!nv || nv->name() != oe->value(k)->name())
      out->push_back("enum value " + oe->value(k)->name() + " removed or renamed");
  }
}

// Every breach of the rule between the released and the current schema, one line each.
std::vector<std::string> RuleBreaches() {
  std::vector<std::string> out;
  const pb::FileDescriptor* old_file = OldFile();
  const pb::FileDescriptor* new_file = NewFile();
  for (int i = 0; i < old_file->message_type_count(); ++i) {
    const pb::Descriptor* od = old_file->message_type(i);
    const pb::Descriptor* nd = new_file->FindMessageTypeByName(od->name());
    if (!nd) {
      out.push_back("message " + od->name() + " removed");
      continue;
    }
    for (int j = 0; j < od->field_count(); ++j) {
      const FD* of = od->field(j);
      const FD* nf = nd->FindFieldByNumber(of->number());
      if (!nf) {
        if (!IsReserved(nd, of)) out.push_back(Name(of) + " removed without reserving it");
        continue;
      }
      if (nf->name() != of->name()) out.push_back(Name(of) + " renamed to " + nf->name());
      if (nf->type() != of->type()) out.push_back(Name(of) + " changed type");
      if (nf->type() == FD::TYPE_MESSAGE && nf->type() == of->type() &&
          nf->message_type()->name() != of->message_type()->name()) {
        out.push_back(Name(of) + " changed message type");
      }
      if (nf->type() == FD::TYPE_ENUM && nf->type() == of->type() &&
          nf->enum_type()->name() != of->enum_type()->name()) {
        out.push_back(Name(of) + " changed enum type");
      }
      if (nf->is_repeated() != of->is_repeated() &&
          !(kSingularToRepeated.count(Name(of)) && nf->is_repeated())) {
        out.push_back(Name(of) + " changed cardinality");
      }
      if (nf->has_presence() != of->has_presence() && !nf->is_repeated()) {
        out.push_back(Name(of) + " changed presence (optional)");
      }
    }
    for (int j = 0; j < od->enum_type_count(); ++j) {
      const pb::EnumDescriptor* oe = od->enum_type(j);
      EnumBreaches(oe, nd->FindEnumTypeByName(oe->name()), od->name() + ".", &out);
    }
  }
  for (int i = 0; i < old_file->enum_type_count(); ++i) {
    const pb::EnumDescriptor* oe = old_file->enum_type(i);
    EnumBreaches(oe, new_file->FindEnumTypeByName(oe->name()), "", &out);
  }
  for (int i = 0; i < old_file->service_count(); ++i) {
    const pb::ServiceDescriptor* os = old_file->service(i);
    const pb::ServiceDescriptor* ns = new_file->FindServiceByName(os->name());
    if (!ns) {
      out.push_back("service " + os->name() + " removed");
      continue;
    }
    for (int j = 0; j < os->method_count(); ++j) {
      const pb::MethodDescriptor* om = os->method(j);
      const pb::MethodDescriptor* nm = ns->FindMethodByName(om->name());
      if (!nm) {
        out.push_back("rpc " + om->name() + " removed");
      } else if (nm->input_type()->name() != om->input_type()->name() ||
                 nm->output_type()->name() != om->output_type()->name() ||
                 nm->client_streaming() != om->client_streaming() ||
                 nm->server_streaming() != om->server_streaming()) {
        out.push_back("rpc " + om->name() + " changed its types or streaming");
      }
    }
  }
  return out;
}

// Sets every field of `m` to a value derived from `seed` (a oneof: its last member), nested
// messages to `depth`. Repeated fields get `repeats` elements, or one where `one_of` (the other
// schema's type) has that field singular.
void Fill(pb::Message* m, int seed, int depth, const pb::Descriptor* one_of) {
  const pb::Reflection* r = m->GetReflection();
  const pb::Descriptor* d = m->GetDescriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    const FD* other = one_of ? one_of->FindFieldByNumber(f->number()) : nullptr;
    const int v = seed * 31 + f->number();
    int n = f->is_repeated() ? ((other && !other->is_repeated()) ? 1 : 2) : 1;
    for (int k = 0; k < n; ++k) {
      const int x = v + k;
      const bool rep = f->is_repeated();
      switch (f->cpp_type()) {
        case FD::CPPTYPE_INT32:
          rep ? r->AddInt32(m, f, -x) : r->SetInt32(m, f, -x);
          break;
        case FD::CPPTYPE_INT64:
          rep ? r->AddInt64(m, f, -int64_t{x} << 33) : r->SetInt64(m, f, -int64_t{x} << 33);
          break;
        case FD::CPPTYPE_UINT32:
          rep ? r->AddUInt32(m, f, x) : r->SetUInt32(m, f, x);
          break;
        case FD::CPPTYPE_UINT64:
          rep ? r->AddUInt64(m, f, static_cast<uint64_t>(x) << 40)
              : r->SetUInt64(m, f, static_cast<uint64_t>(x) << 40);
          break;
        case FD::CPPTYPE_DOUBLE:
          rep ? r->AddDouble(m, f, x + 0.25) : r->SetDouble(m, f, x + 0.25);
          break;
        case FD::CPPTYPE_FLOAT:
          rep ? r->AddFloat(m, f, x + 0.5f) : r->SetFloat(m, f, x + 0.5f);
          break;
        case FD::CPPTYPE_BOOL:
          rep ? r->AddBool(m, f, true) : r->SetBool(m, f, true);
          break;
        case FD::CPPTYPE_ENUM: {
          const pb::EnumDescriptor* e = f->enum_type();
          const int num = e->value(x % e->value_count())->number();
          rep ? r->AddEnumValue(m, f, num) : r->SetEnumValue(m, f, num);
          break;
        }
        case FD::CPPTYPE_STRING: {
          std::string s = f->name() + "-" + std::to_string(x);
          if (f->type() == FD::TYPE_BYTES) s += std::string("\0\xff\x80", 3);
          rep ? r->AddString(m, f, s) : r->SetString(m, f, s);
          break;
        }
        case FD::CPPTYPE_MESSAGE: {
          if (depth == 0 || f->message_type()->file() != d->file()) break;  // Any: left empty
          pb::Message* sub = rep ? r->AddMessage(m, f) : r->MutableMessage(m, f);
          const pb::Descriptor* other_sub =
              (other && other->type() == FD::TYPE_MESSAGE) ? other->message_type() : nullptr;
          Fill(sub, x, depth - 1, other_sub);
          break;
        }
      }
    }
  }
}

std::unique_ptr<pb::Message> New(const pb::Descriptor* d) {
  return std::unique_ptr<pb::Message>(
      pb::MessageFactory::generated_factory()->GetPrototype(d)->New());
}

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice s(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&s, 1);
}

std::string Bytes(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  REQUIRE(b.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

std::string Joined(const std::vector<std::string_view>& pieces) {
  std::string out;
  for (auto p : pieces) out.append(p);
  return out;
}

TEST_CASE("the current schema keeps every released message, field, enum value and rpc", "[proto]") {
  const std::vector<std::string> breaches = RuleBreaches();
  for (const auto& b : breaches) UNSCOPED_INFO(b);
  CHECK(breaches.empty());
  // The checker catches a breach: the one allowed exception is a breach of the plain rule.
  CHECK(kSingularToRepeated.size() == 2);
  const FD* old_chunk = v0::PushMessage::descriptor()->FindFieldByName("chunk");
  const FD* new_chunk = proto::PushMessage::descriptor()->FindFieldByName("chunk");
  CHECK(old_chunk->is_repeated() != new_chunk->is_repeated());
}

TEST_CASE("every released message's bytes parse with the current schema, nothing lost", "[proto]") {
  const pb::FileDescriptor* old_file = OldFile();
  for (int i = 0; i < old_file->message_type_count(); ++i) {
    const pb::Descriptor* od = old_file->message_type(i);
    const pb::Descriptor* nd = NewFile()->FindMessageTypeByName(od->name());
    REQUIRE(nd != nullptr);
    INFO(od->name());
    auto old_msg = New(od);
    Fill(old_msg.get(), i, 3, nd);
    const std::string bytes = old_msg->SerializeAsString();
    auto new_msg = New(nd);
    REQUIRE(new_msg->ParseFromString(bytes));
    auto back = New(od);
    REQUIRE(back->ParseFromString(new_msg->SerializeAsString()));
    CHECK(pb::util::MessageDifferencer::Equals(*old_msg, *back));
  }
}

TEST_CASE("current bytes the released schema can express are read equal by it", "[proto]") {
  const pb::FileDescriptor* old_file = OldFile();
  for (int i = 0; i < old_file->message_type_count(); ++i) {
    const pb::Descriptor* od = old_file->message_type(i);
    const pb::Descriptor* nd = NewFile()->FindMessageTypeByName(od->name());
    REQUIRE(nd != nullptr);
    INFO(od->name());
    auto new_msg = New(nd);
    Fill(new_msg.get(), i, 3, od);
    if (nd->name() == "PushMessage" || nd->name() == "PullMessage") {
      // A released reader holds a header or a chunk per message (a oneof): one of them.
      new_msg->GetReflection()->ClearField(new_msg.get(), nd->FindFieldByName("header"));
    }
    auto old_msg = New(od);
    REQUIRE(old_msg->ParseFromString(new_msg->SerializeAsString()));
    // Fields the released schema lacks travel through it as unknown fields.
    auto back = New(nd);
    REQUIRE(back->ParseFromString(old_msg->SerializeAsString()));
    CHECK(pb::util::MessageDifferencer::Equals(*new_msg, *back));
  }
}

v0::TensorChunk OldChunk(const std::string& key, const std::string& data, uint64_t offset,
                         uint64_t total) {
  v0::TensorChunk c;
  c.set_key(key);
  c.set_codec("topk");
  c.add_shape(3);
  c.add_shape(5);
  c.set_dtype(0);
  c.set_total_bytes(total);
  c.set_offset(offset);
  c.set_data(data);
  return c;
}

TEST_CASE("a released client's push stream reads through the server's own parser", "[proto]") {
  // The released framing: a header message, then one chunk per message.
  v0::PushMessage head;
  head.mutable_header()->set_worker_id("old-worker");
  head.mutable_header()->set_incarnation(7);
  head.mutable_header()->set_step(41);
  head.mutable_header()->set_lr(0.05);
  std::vector<std::string> stream = {head.SerializeAsString()};
  const std::string a(3000, 'a'), b1("\x01\x02\x03\0", 4), b2("tail");
  for (const v0::TensorChunk& c : {OldChunk("conv.w", a, 0, a.size()), OldChunk("fc.b", b1, 0, 8),
                                   OldChunk("fc.b", b2, 4, 8)}) {
    v0::PushMessage m;
    *m.mutable_chunk() = c;
    stream.push_back(m.SerializeAsString());
  }

  grpc::ByteBuffer first = Buffer(stream[0]);
  transport::WireMessage m;
  transport::ParseMessage(&first, &m);
  REQUIRE(m.has_header);
  CHECK(m.chunks.empty());
  proto::PushHeader header;
  REQUIRE(header.ParseFromString(m.header));
  CHECK(header.worker_id() == "old-worker");
  CHECK(header.incarnation() == 7);
  CHECK(header.step() == 41);
  CHECK(header.lr() == 0.05);
  CHECK(header.key_lr_size() == 0);  // added later: absent, so `lr` holds for every key

  size_t next = 1;
  std::vector<std::pair<proto::TensorChunk, std::string>> got;
  transport::ForEachChunk(
      &m,
      [&](grpc::ByteBuffer* out) {
        if (next == stream.size()) return false;
        *out = Buffer(stream[next++]);
        return true;
      },
      [&](const transport::WireChunk& c) { got.emplace_back(c.chunk, Joined(c.data)); }, "push");
  REQUIRE(got.size() == 3);
  CHECK(got[0].first.key() == "conv.w");
  CHECK(got[0].second == a);
  CHECK(got[1].first.key() == "fc.b");
  CHECK(got[1].second == b1);
  CHECK(got[2].first.offset() == 4);
  CHECK(got[2].first.total_bytes() == 8);
  CHECK(got[2].second == b2);
  CHECK(got[2].first.shape_size() == 2);
  CHECK(got[2].first.codec() == "topk");

  // The generated current type reads the same messages (a client in another language).
  proto::PushMessage typed;
  REQUIRE(typed.ParseFromString(stream[1]));
  REQUIRE(typed.chunk_size() == 1);
  CHECK(typed.chunk(0).data() == a);
  CHECK_FALSE(typed.has_header());
}

TEST_CASE("a released client reads a reply framed one chunk per message", "[proto]") {
  proto::PullHeader h;
  h.set_step(12);
  h.set_wait_ms(3.5);
  h.set_contributors(8);
  const std::string data(5000, '\x7f');
  proto::TensorChunk meta;
  meta.set_key("w");
  meta.set_codec("qsgd");
  meta.add_shape(1250);
  meta.set_total_bytes(data.size());

  v0::PullMessage old_head;
  REQUIRE(old_head.ParseFromString(Bytes(transport::FrameHeader(h))));
  REQUIRE(old_head.kind_case() == v0::PullMessage::kHeader);
  CHECK(old_head.header().step() == 12);
  CHECK(old_head.header().wait_ms() == 3.5);
  CHECK(old_head.header().contributors() == 8);

  v0::PullMessage old_chunk;
  REQUIRE(old_chunk.ParseFromString(Bytes(transport::FrameChunk(meta, data.data(), data.size()))));
  REQUIRE(old_chunk.kind_case() == v0::PullMessage::kChunk);
  CHECK(old_chunk.chunk().key() == "w");
  CHECK(old_chunk.chunk().codec() == "qsgd");
  CHECK(old_chunk.chunk().total_bytes() == data.size());
  CHECK(old_chunk.chunk().data() == data);

  // What the released schema cannot express: the gathered form (a header and chunks in one
  // message) keeps only the last field for a released reader -- why docs/protocol.md says a
  // server talking to released clients must frame one chunk per message.
  std::vector<std::string> gathered;
  transport::MessageWriter w([&](grpc::ByteBuffer b) {
    gathered.push_back(Bytes(b));
    return true;
  });
  w.Header(h);
  REQUIRE(w.Payload(meta, data.data(), data.size(), nullptr));
  REQUIRE(w.Flush());
  REQUIRE(gathered.size() == 1);
  v0::PullMessage lossy;
  REQUIRE(lossy.ParseFromString(gathered[0]));
  CHECK(lossy.kind_case() == v0::PullMessage::kChunk);
  proto::PullMessage current;
  REQUIRE(current.ParseFromString(gathered[0]));
  CHECK(current.has_header());
  CHECK(current.chunk_size() == 1);
}

}  // namespace
}  // namespace gradpress::testing
