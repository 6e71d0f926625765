// Streamed pushes (ParameterStore::BeginPush) and their wire format (transport/wire.h):
// pieces of any size, the accumulator or a staging buffer, more pushes than buffers, and
// the store left unchanged by a push that fails or breaks off midway.
#include <chrono>
#include <cstring>
#include <future>
#include <map>

#include "server/parameter_store.h"
#include "tests/server/cluster.h"
#include "transport/wire.h"

namespace gradpress::testing {
namespace {

using server::ParameterStore;

server::Clock::time_point Soon() { return server::Clock::now() + std::chrono::seconds(20); }
std::string Name(int w) { return "worker-" + std::to_string(w); }

const std::vector<TensorSpec> kModel = Specs({{1000}, {3, 5}});

struct Store : InProcessStore {
  explicit Store(int workers) : InProcessStore(workers, kModel) {}
};

std::vector<torch::Tensor> Grads(int w) {
  auto gen = at::detail::createCPUGenerator(77 + w);
  return {torch::randn({1000}, gen), torch::randn({3, 5}, gen)};
}

// The payload bytes of one push of Grads(w): "none", float32.
constexpr uint64_t kPushBytes = 4 * (1000 + 3 * 5);

// Sends a tensor's "none" payload in pieces of `piece` bytes (floats straddle pieces).
void AddInPieces(ParameterStore::PushSession& s, const std::string& key, const torch::Tensor& t,
                 size_t piece) {
  const std::string bytes = NonePayload(key, t).payload.bytes;
  ParameterStore::Piece p{key, "none", t.sizes().vec(), 0, bytes.size(), 0};
  for (size_t off = 0; off < bytes.size(); off += piece) {
    p.offset = off;
    s.Add(p, std::string_view(bytes).substr(off, piece));
  }
}

void AddAll(ParameterStore::PushSession& s, const std::vector<torch::Tensor>& g, size_t piece) {
  AddInPieces(s, "layer0", g[0], piece);
  AddInPieces(s, "layer1", g[1], piece);
}

torch::Tensor Key(const server::StepResult& r, size_t i) {
  const std::string& b = r.payloads[i].payload.bytes;
  auto t = torch::empty({static_cast<int64_t>(b.size() / sizeof(float))});
  std::memcpy(t.data_ptr<float>(), b.data(), b.size());
  return t.view(kModel[i].shape);
}

void CheckMean(const server::StepResult& r, const std::vector<std::vector<torch::Tensor>>& g) {
  for (size_t i = 0; i < kModel.size(); ++i) {
    torch::Tensor sum = torch::zeros(kModel[i].shape);
    for (const auto& w : g) sum += w[i];
    CHECK(torch::allclose(Key(r, i), sum / static_cast<double>(g.size()), 1e-6, 1e-6));
  }
}

TEST_CASE("streamed push: odd pieces, staging push committed before the first", "[server]") {
  Store s(2);
  auto first = s.store.BeginPush({Name(0), 1}, 0, 0, Soon());   // lands in the accumulator
  auto second = s.store.BeginPush({Name(1), 1}, 0, 0, Soon());  // in a staging buffer
  AddAll(*second, Grads(1), 7);
  // The staging push waits for the first to land before it is added: when its Commit
  // returns, both pushes are counted.
  const uint64_t before = s.store.Stats().bytes_in;
  uint64_t bytes_when_committed = 0;
  auto committed = std::async(std::launch::async, [&] {
    auto r = second->Commit(false);
    bytes_when_committed = s.store.Stats().bytes_in;
    return r;
  });
  CHECK(committed.wait_for(std::chrono::milliseconds(50)) == std::future_status::timeout);
  AddAll(*first, Grads(0), 4096 + 3);
  first->Commit(false);
  committed.get();
  CHECK(bytes_when_committed == before + 2 * kPushBytes);
  auto r = s.store.Pull({Name(0), 1}, 0, Soon());
  REQUIRE(r->contributors == 2);
  CheckMean(*r, {Grads(0), Grads(1)});
}

TEST_CASE("streamed push broken off or rejected midway leaves the store unchanged", "[server]") {
  Store s(2);
  {  // the step's first push breaks off half way through (stream ended, client gone)
    auto broken = s.store.BeginPush({Name(0), 1}, 0, 0, Soon());
    AddInPieces(*broken, "layer0", Grads(9)[0], 1000);
  }
  {  // NaN in the last piece of a staged push
    auto first = s.store.BeginPush({Name(0), 1}, 0, 0, Soon());
    AddAll(*first, Grads(0), 512);
    first->Commit(false);
    auto bad = Grads(1);
    bad[0][999] = std::numeric_limits<float>::quiet_NaN();
    auto session = s.store.BeginPush({Name(1), 1}, 0, 0, Soon());
    CHECK_THROWS_WITH(AddAll(*session, bad, 512), Catch::Contains("key 'layer0'") &&
                                                      Catch::Contains("NaN or Inf at element 999"));
  }
  {  // a key missing at Commit
    auto session = s.store.BeginPush({Name(1), 1}, 0, 0, Soon());
    AddInPieces(*session, "layer0", Grads(1)[0], 100);
    CHECK_THROWS_WITH(session->Commit(), Catch::Contains("missing key 'layer1'"));
  }
  auto session = s.store.BeginPush({Name(1), 1}, 0, 0, Soon());
  AddAll(*session, Grads(1), 100);
  auto r = session->Commit();
  CHECK(r.result->contributors == 2);
  CheckMean(*r.result, {Grads(0), Grads(1)});
  CHECK(s.store.Stats().rejected.at("non_finite") == 1);
}

TEST_CASE("more concurrent pushes than buffers: the later ones wait for a free one", "[server]") {
  Store s(4);
  const uint64_t before = s.store.Stats().bytes_in;
  // Step 0, in a known order: worker-0's push holds the accumulator, worker-1's the one
  // staging buffer (kMaxStaging = 1, server/parameter_store.h), taken by its first dense piece.
  auto first = s.store.BeginPush({Name(0), 1}, 0, 0, Soon());
  auto second = s.store.BeginPush({Name(1), 1}, 0, 0, Soon());
  AddAll(*second, Grads(1), 1 << 10);
  // A third push finds no buffer free when its first dense piece arrives and waits for one,
  // here until its short deadline.
  {
    auto third = s.store.BeginPush({Name(2), 1}, 0, 0,
                                   server::Clock::now() + std::chrono::milliseconds(100));
    CHECK_THROWS_WITH(AddAll(*third, Grads(2), 1 << 10),
                      Catch::Contains("no staging buffer came free before the deadline"));
  }
  CHECK(s.store.Stats().bytes_in == before);  // and changed nothing
  // Given time, it gets the buffer the second push frees when it lands, not before: both
  // earlier pushes are counted by the time its pieces are in.
  uint64_t bytes_when_third_got_buffer = 0;
  auto third = std::async(std::launch::async, [&] {
    auto session = s.store.BeginPush({Name(2), 1}, 0, 0, Soon());
    AddAll(*session, Grads(2), 1 << 10);
    bytes_when_third_got_buffer = s.store.Stats().bytes_in;
    return session->Commit(false);
  });
  AddAll(*first, Grads(0), 1 << 10);
  first->Commit(false);
  second->Commit(false);
  third.get();
  CHECK(bytes_when_third_got_buffer == before + 2 * kPushBytes);
  auto last = s.store.BeginPush({Name(3), 1}, 0, 0, Soon());
  AddAll(*last, Grads(3), 1 << 10);
  const auto r0 = last->Commit();
  REQUIRE(r0.result);
  CHECK(r0.result->contributors == 4);
  CheckMean(*r0.result, {Grads(0), Grads(1), Grads(2), Grads(3)});
  CHECK(s.store.Stats().bytes_in == before + 4 * kPushBytes);
  // Then steps of four pushes at once, in whatever order the threads run.
  for (int64_t step = 1; step < 4; ++step) {
    std::vector<std::shared_ptr<const server::StepResult>> got(4);
    Cluster::Parallel(4, [&](int w) {
      auto session = s.store.BeginPush({Name(w), 1}, step, 0, Soon());
      AddAll(*session, Grads(w), 1 << 10);
      got[w] = session->Commit().result;
    });
    for (const auto& r : got) CHECK(r == got[0]);
    CheckMean(*got[0], {Grads(0), Grads(1), Grads(2), Grads(3)});
  }
}

grpc::ByteBuffer Buffer(const std::string& bytes, size_t split) {
  grpc::Slice slices[2] = {grpc::Slice(bytes.data(), split),
                           grpc::Slice(bytes.data() + split, bytes.size() - split)};
  return grpc::ByteBuffer(slices, 2);
}

std::string Flatten(const grpc::ByteBuffer& b) {
  std::vector<grpc::Slice> slices;
  REQUIRE(b.Dump(&slices).ok());
  std::string bytes;
  for (const auto& s : slices) bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return bytes;
}

TEST_CASE("wire: raw chunk frames are protobuf messages, and back", "[server]") {
  proto::TensorChunk meta;
  meta.set_key("conv1.weight");
  meta.set_codec("none");
  meta.add_shape(3);
  meta.add_shape(5);
  meta.set_total_bytes(60);
  meta.set_offset(20);
  const std::string data = "0123456789abcdefghijklmnopqrstuvwxyz0123";
  const std::string bytes = Flatten(transport::FrameChunk(meta, data.data(), data.size()));
  proto::PushMessage parsed;
  REQUIRE(parsed.ParseFromString(bytes));  // what the generated types read
  REQUIRE(parsed.chunk_size() == 1);
  CHECK(parsed.chunk(0).key() == "conv1.weight");
  CHECK(parsed.chunk(0).offset() == 20);
  CHECK(parsed.chunk(0).data() == data);

  // And a protobuf-serialized message, split anywhere, read as views.
  const std::string proto_bytes = parsed.SerializeAsString();
  for (size_t split : {size_t{1}, size_t{5}, proto_bytes.size() - 7, proto_bytes.size() - 1}) {
    grpc::ByteBuffer b = Buffer(proto_bytes, split);
    transport::WireMessage m;
    transport::ParseMessage(&b, &m);
    REQUIRE(m.chunks.size() == 1);
    const transport::WireChunk& c = m.chunks[0];
    CHECK(c.chunk.key() == "conv1.weight");
    CHECK(c.chunk.shape_size() == 2);
    CHECK(c.chunk.total_bytes() == 60);
    std::string got;
    for (auto v : c.data) got.append(v);
    CHECK(got == data);
    CHECK(c.data_size == data.size());
  }

  proto::PushHeader h;
  h.set_worker_id("worker-3");
  h.set_step(42);
  grpc::ByteBuffer hb = transport::FrameHeader(h);
  transport::WireMessage m;
  transport::ParseMessage(&hb, &m);
  proto::PushHeader back;
  REQUIRE((m.has_header && back.ParseFromString(m.header)));
  CHECK(back.worker_id() == "worker-3");
  CHECK(back.step() == 42);

  // Malformed: cut short, or a length past the end.
  for (size_t cut : {size_t{1}, size_t{10}, proto_bytes.size() - 1}) {
    grpc::ByteBuffer b = Buffer(proto_bytes.substr(0, cut), cut / 2);
    CHECK_THROWS_AS(transport::ParseMessage(&b, &m), InvalidArgument);
  }
  std::string long_len = proto_bytes;
  long_len[1] = '\x7f';
  grpc::ByteBuffer b = Buffer(long_len, 3);
  CHECK_THROWS_AS(transport::ParseMessage(&b, &m), InvalidArgument);
  // Two headers in one message: protobuf would merge them, the stream refuses.
  const std::string two = Flatten(transport::FrameHeader(h)) + Flatten(transport::FrameHeader(h));
  grpc::ByteBuffer tb = Buffer(two, 2);
  CHECK_THROWS_AS(transport::ParseMessage(&tb, &m), InvalidArgument);
}

TEST_CASE("wire: a writer gathers small payloads into one message and splits big ones",
          "[server]") {
  // Three small keys, then one of 2.5 chunks' bytes, then a small one and an empty one.
  const std::vector<size_t> sizes = {10, 300, 7, transport::kChunkBytes * 5 / 2, 40, 0};
  std::vector<std::string> payloads;
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::string p(sizes[i], '\0');
    for (size_t j = 0; j < p.size(); ++j) p[j] = static_cast<char>(i * 31 + j * 7);
    payloads.push_back(std::move(p));
  }
  std::vector<std::string> messages;  // serialized, as the stream carries them
  transport::MessageWriter w([&](grpc::ByteBuffer b) {
    messages.push_back(Flatten(b));
    return true;
  });
  proto::PushHeader h;
  h.set_worker_id("worker-1");
  w.Header(h);
  auto keep = std::make_shared<int>(0);
  for (size_t i = 0; i < payloads.size(); ++i) {
    proto::TensorChunk meta;
    meta.set_key("k" + std::to_string(i));
    meta.set_codec("none");
    REQUIRE(w.Payload(meta, payloads[i].data(), payloads[i].size(), i % 2 ? keep : nullptr));
  }
  REQUIRE(w.Flush());
  // header + keys 0-2 | the big key's first 2 MiB | its next 2 MiB | its last half + keys 4, 5.
  REQUIRE(messages.size() == 4);
  std::map<std::string, std::string> got;
  size_t chunks = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    proto::PushMessage typed;  // what a generated client reads
    REQUIRE(typed.ParseFromString(messages[i]));
    CHECK(typed.has_header() == (i == 0));
    grpc::ByteBuffer b = Buffer(messages[i], messages[i].size() / 3);
    transport::WireMessage m;
    transport::ParseMessage(&b, &m);
    CHECK(m.has_header == (i == 0));
    REQUIRE(m.chunks.size() == static_cast<size_t>(typed.chunk_size()));
    size_t data = 0;
    for (size_t c = 0; c < m.chunks.size(); ++c) {
      const transport::WireChunk& wc = m.chunks[c];
      const std::string key = wc.chunk.key();
      CHECK(typed.chunk(static_cast<int>(c)).key() == key);
      CHECK(wc.chunk.offset() == got[key].size());
      CHECK(wc.chunk.total_bytes() == payloads[std::stoul(key.substr(1))].size());
      for (auto v : wc.data) got[key].append(v);
      data += wc.data_size;
      ++chunks;
    }
    CHECK(data <= transport::kChunkBytes);
  }
  CHECK(chunks == 8);  // keys 0-2, three pieces of key 3, keys 4 and 5 (one empty chunk)
  for (size_t i = 0; i < payloads.size(); ++i) CHECK(got["k" + std::to_string(i)] == payloads[i]);
}

}  // namespace
}  // namespace gradpress::testing
