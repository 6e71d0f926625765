#pragma once
// The one place a worker's client is chosen: the carrier (gRPC, or the one a caller passes:
// gradpress-sim's in-process client), one server or the sharded composite (several servers,
// or a tensor over cluster.partition_mb), and the codec state the Trainer checkpoints.
//
//   WorkerClient c = MakeWorkerClient(config, ClientOptionsFor(config, rank, ...), &params);
//   c.client->Register(specs, split);  ...  c.codecs->SaveState();
//
// Thread-safety: values.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/config.h"
#include "worker/client/key_codecs.h"
#include "worker/client/ps_client.h"

namespace gradpress::worker {

// A carrier over `codecs` (which outlive it): GrpcPsClient when unset.
using CarrierFactory =
    std::function<std::unique_ptr<PsClient>(const ClientOptions&, KeyCodecs* codecs)>;

struct WorkerClient {
  std::unique_ptr<KeyCodecs> own_codecs;  // one server's (null: the sharded client's own)
  std::unique_ptr<PsClient> client;
  CodecState* codecs = nullptr;   // the push codecs' state, whichever client
  ShardRejoin* rejoin = nullptr;  // several servers: a partial rejoin (null: one server)
};

// The client options of worker `rank` of a job (server: "" = cluster.server).
ClientOptions ClientOptionsFor(const Config& c, int rank, uint64_t incarnation,
                               const std::string& server);
// params: the model's parameters, which outlive the client: whether a tensor needs
// partitions, and the weights a restarted shard met inside a call takes (their values then:
// nothing of that call's step is applied to its part, since the call failed).
WorkerClient MakeWorkerClient(const Config& c, const ClientOptions& options,
                              const std::vector<torch::Tensor>* params,
                              const CarrierFactory& carrier = {});

}  // namespace gradpress::worker
