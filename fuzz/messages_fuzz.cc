// gradpress-fuzz-messages: every unary request of the protocol, parsed from arbitrary bytes
// (protobuf ParseFromArray, as gRPC's deserializer does) and handed to a ParameterStore the
// way ParameterService does, in any order.
//
// Input: [options] then records ([u16 length][bytes], fuzz_util.h): the record's first byte
// picks the request type (kinds below), the rest is its serialized message.
//   options bit 0: async (exchange=weights); bit 1: a fresh store (no model: the first
//   Register sets it), else "worker-0" and "worker-1" are registered and initialized.
// Deadlines are "now", so a call that would wait returns Unavailable at once.
// Oracles besides the sanitizers: only gradpress::Error may be thrown; a result the store
// returns has one payload per key of the model.
#include <google/protobuf/stubs/common.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/error.h"
#include "compressors/registry.h"
#include "fuzz/fuzz_util.h"
#include "proto/gradpress.pb.h"
#include "server/parameter_store.h"
#include "transport/chunks.h"

namespace gradpress::fuzz {
namespace {

using compressors::TensorSpec;
using server::Clock;
using server::ParameterStore;

enum Kind : uint8_t { kRegister, kHeartbeat, kPull, kPullWeights, kElect, kStats, kKinds };

// The largest model a fuzzed Register may declare. ParameterStore allocates weights and an
// accumulator for what the first worker declares; a hostile first Register can ask for any
// size (see the report), which the fuzzer keeps out of its 2 GiB RSS limit.
constexpr int64_t kMaxModelNumel = 1 << 20;

const std::vector<TensorSpec>& Model() {
  static const std::vector<TensorSpec> model = {{"layer0", {2000}}, {"layer1", {3, 5}}};
  return model;
}

void CheckResult(const server::StepResult& r, size_t keys) {
  if (r.payloads.size() != keys) {
    std::fprintf(stderr, "gradpress-fuzz-messages: result of %zu keys, model has %zu\n",
                 r.payloads.size(), keys);
    std::abort();
  }
}

template <typename Message>
bool Parse(std::string_view bytes, Message* m) {
  return m->ParseFromArray(bytes.data(), static_cast<int>(bytes.size()));
}

void Handle(ParameterStore& store, Kind kind, std::string_view bytes) {
  const auto now = Clock::now();
  switch (kind) {
    case kRegister: {
      proto::RegisterRequest req;
      if (!Parse(bytes, &req)) return;
      std::vector<TensorSpec> model;
      int64_t total = 0;
      for (const auto& s : req.model()) {
        model.push_back(transport::FromProto(s));
        const int64_t n = Numel(model.back().shape);  // -1: the store refuses the shape
        if (n > kMaxModelNumel - total) return;
        total += std::max<int64_t>(n, 0);
      }
      store.Register({req.worker_id(), req.incarnation()}, model, req.config_hash());
      return;
    }
    case kHeartbeat: {
      proto::HeartbeatRequest req;
      if (!Parse(bytes, &req)) return;
      store.Heartbeat({req.worker_id(), req.incarnation()});
      store.Stats();
      return;
    }
    case kPull: {
      proto::PullRequest req;
      if (!Parse(bytes, &req)) return;
      auto r = store.Pull({req.worker_id(), req.incarnation()}, req.step(), now);
      if (r) CheckResult(*r, store.model().size());
      return;
    }
    case kPullWeights: {
      proto::PullRequest req;
      if (!Parse(bytes, &req)) return;
      auto r = store.Weights({req.worker_id(), req.incarnation()}, std::max<int64_t>(0, req.step()),
                             now);
      if (r) CheckResult(*r, store.model().size());
      return;
    }
    case kElect: {
      proto::ElectRequest req;
      if (!Parse(bytes, &req)) return;
      store.Elect({req.worker_id(), req.incarnation()}, req.round(), req.score(), now);
      return;
    }
    case kStats: {
      proto::StatsRequest req;
      if (!Parse(bytes, &req)) return;
      store.Stats().Prometheus();
      return;
    }
    default:
      return;
  }
}

// --- seeds: valid requests --------------------------------------------------------------

std::string Record(Kind kind, const google::protobuf::MessageLite& m) {
  std::string out;
  PutRecord(std::string(1, static_cast<char>(kind)) + m.SerializeAsString(), &out);
  return out;
}

void WriteSeeds(Seeds& seeds) {
  proto::RegisterRequest reg;
  reg.set_worker_id("worker-2");
  reg.set_incarnation(1);
  reg.set_config_hash("job");
  for (const auto& s : Model()) transport::ToProto(s, reg.add_model());
  proto::HeartbeatRequest hb;
  hb.set_worker_id("worker-0");
  hb.set_incarnation(1);
  proto::PullRequest pull;
  pull.set_worker_id("worker-1");
  pull.set_incarnation(1);
  pull.set_step(-1);
  proto::ElectRequest elect;
  elect.set_worker_id("worker-0");
  elect.set_incarnation(1);
  elect.set_round(0);
  elect.set_score(0.5);
  const std::string all = Record(kRegister, reg) + Record(kHeartbeat, hb) + Record(kPull, pull) +
                          Record(kPullWeights, pull) + Record(kElect, elect) +
                          Record(kStats, proto::StatsRequest());
  for (char options : {0, 1, 2, 3})
    seeds.Write("messages-" + std::to_string(options), options + all);
  reg.set_worker_id("worker-0");
  seeds.Write("messages-register-fresh", "\x02" + Record(kRegister, reg) + Record(kHeartbeat, hb));
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
  gradpress::server::StoreOptions o;
  o.workers = 3;
  o.threads = 1;
  o.stats_every = 0;
  o.async = o.exchange_weights = options & 1;
  ParameterStore store(o);
  if (!(options & 2)) {
    std::vector<gradpress::compressors::KeyPayload> zeros;
    auto none = gradpress::compressors::MakeDecoder("none");
    for (const auto& s : Model()) {
      const std::vector<float> v(Numel(s.shape), 0.f);
      zeros.push_back({s.key,
                       {"none", s.shape, gradpress::compressors::DType::kFloat32,
                        none->EncodeBytes(v.data(), static_cast<int64_t>(v.size()))}});
    }
    store.Register({"worker-0", 1}, Model(), "job");
    store.Register({"worker-1", 1}, Model(), "job");
    store.InitWeights({"worker-0", 1}, zeros);
  }
  while (auto r = in.Next()) {
    if (r->bytes.empty()) continue;
    try {
      Handle(store, static_cast<Kind>(static_cast<uint8_t>(r->bytes[0]) % kKinds),
             r->bytes.substr(1));
    } catch (const gradpress::Error&) {
    }
    store.CheckTimeouts();
  }
  return 0;
}
