#pragma once
// What a worker's client is configured with (ClientOptions) and what registering tells it
// (RegisterInfo); shared by every carrier (grpc_ps_client.h, sim/in_process_ps_client.h), the
// codec owner (key_codecs.h) and the sharded client (sharded_ps_client.h).
#include <cstdint>
#include <memory>
#include <string>

#include "common/config.h"
#include "common/error.h"
#include "transport/fault_injection.h"

namespace gradpress::worker {

class RowOutbox;  // row_outbox.h

struct ClientOptions {
  std::string server = "127.0.0.1:50051";  // host:port (gRPC only)
  std::string worker_id = "worker-0";
  uint64_t incarnation = 1;         // raise on every restart of the worker process
  std::string config_hash;          // the job's ConfigHash; all workers must agree
  CodecSpec push;                   // codec (+ then, + error feedback) per key
  int64_t min_numel = 1024;         // smaller tensors travel uncompressed
  bool skip_1d = false;             // 1-D tensors travel uncompressed
  double deadline_s = 120;          // per call, seconds
  int max_retries = 10;             // UNAVAILABLE retries per call (gRPC)
  double backoff_initial_s = 0.05;  // doubled per retry, capped at backoff_max_s
  double backoff_max_s = 5;
  double momentum_correction = 0;  // > 0: compressed keys' push codecs are wrapped in DGC's
                                   // MomentumCorrection with this momentum
  double heartbeat_s = 0;          // > 0 (gRPC): a background Heartbeat this often after
                                   // Register, so long local phases do not look silent
  SecurityConfig security;         // TLS, token (gRPC; default: plaintext, no token)
  int shard = 0, shards = 1;       // sharded servers: which shard this client talks to
  uint64_t placement_hash = 0;     // ... and the placement it registers with
  transport::FaultOptions faults;  // injected per attempt (gRPC; default: none)
  // The dashboard's rows waiting for the next push or heartbeat (gRPC; null: none sent).
  std::shared_ptr<RowOutbox> rows;
};

struct RegisterInfo {
  int rank = 0;
  int world_size = 0;
  int64_t server_step = 0;
  bool initialized = false;
};

// The server no longer knows this worker (it restarted without a checkpoint of it), or knows
// it but wants it to register again (restored from a checkpoint; dropped after
// worker_timeout_s): register again and go on.
bool LostByServer(const Error& e);

}  // namespace gradpress::worker
