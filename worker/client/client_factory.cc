// The worker's client, chosen once (client_factory.h).
#include "worker/client/client_factory.h"

#include "transport/fault_injection.h"
#include "worker/client/grpc_ps_client.h"
#include "worker/client/sharded_ps_client.h"

namespace gradpress::worker {

ClientOptions ClientOptionsFor(const Config& c, int rank, uint64_t incarnation,
                               const std::string& server) {
  ClientOptions co;
  co.server = server.empty() ? c.cluster.server : server;
  co.worker_id = "worker-" + std::to_string(rank);
  co.incarnation = incarnation;
  co.config_hash = ConfigHash(c);
  co.push = c.push;
  co.min_numel = c.compress.min_numel;
  co.skip_1d = c.compress.skip_1d;
  co.momentum_correction = c.compress.momentum_correction;
  co.deadline_s = c.server.deadline_s;
  co.heartbeat_s = c.server.worker_timeout_s / 4;
  co.security = c.security;                        // $GRADPRESS_TOKEN is read by the client
  co.faults = transport::ResolveFaults(c.faults);  // $GRADPRESS_FAULTS overrides the config
  return co;
}

WorkerClient MakeWorkerClient(const Config& c, const ClientOptions& options,
                              const std::vector<torch::Tensor>* params,
                              const CarrierFactory& carrier) {
  CarrierFactory make = carrier;
  if (!make) {
    make = [](const ClientOptions& o, KeyCodecs* codecs) -> std::unique_ptr<PsClient> {
      return std::make_unique<GrpcPsClient>(o, codecs);
    };
  }
  WorkerClient out;
  std::vector<std::string> servers = c.cluster.servers;
  if (servers.empty()) servers = {options.server};
  if (ShardedPsClient::Needed(*params, servers.size(), c.cluster.partition_mb)) {
    auto sharded =
        std::make_unique<ShardedPsClient>(options, servers, c.cluster.partition_mb, make);
    sharded->set_weights_source([params] { return DetachedAliases(*params); });
    out.rejoin = sharded.get();
    out.codecs = sharded.get();
    out.client = std::move(sharded);
    return out;
  }
  out.own_codecs = std::make_unique<KeyCodecs>(options);
  out.codecs = out.own_codecs.get();
  out.client = make(options, out.own_codecs.get());
  return out;
}

}  // namespace gradpress::worker
