#pragma once
// Injected faults, for tests and fault scenarios: lost requests, lost replies, delays on the
// worker side; UNAVAILABLE answers on the server side. Configured by the `faults:` config
// block, overridden key by key by $GRADPRESS_FAULTS:
//
//   GRADPRESS_FAULTS="drop=0.1,drop_reply=0.05,delay=0.1,delay_ms=20,fail=0.02,seed=7"
//
//   FaultOptions o = ResolveFaults(config.faults);    // throws InvalidArgument on bad env text
//   FaultInjector inj(o, /*stream=*/StreamOf("worker-0"));
//   FaultInjector::Attempt a = inj.NextAttempt();       // per RPC attempt, worker side
//   if (inj.NextFail()) return {UNAVAILABLE, "injected fault"};   // per RPC, server side
//
// Semantics (fractions are probabilities per attempt, in [0, 1]):
// - drop: the request is lost before it reaches the server: the attempt fails with
//   Unavailable "injected fault: request dropped" and nothing is sent.
// - drop_reply: the call runs to completion, then its reply is lost: the attempt fails with
//   Unavailable, so the retry is a duplicate the server must acknowledge.
// - delay: the attempt first sleeps delay_ms.
// - fail (server): the call is answered UNAVAILABLE "injected fault" before the store sees it.
// Each attempt draws every kind once from one RNG per injector (seeded by seed and stream), so
// a run is deterministic per seed. Every injected fault counts in injected().
// Thread-safety: NextAttempt / NextFail may be called concurrently (a mutex guards the RNG).
#include <atomic>
#include <cstdint>
#include <mutex>
#include <random>
#include <string>

#include "common/config.h"

namespace gradpress::transport {

inline constexpr char kFaultsEnv[] = "GRADPRESS_FAULTS";

struct FaultOptions {
  double drop = 0, drop_reply = 0, delay = 0;
  int delay_ms = 20;
  double fail = 0;
  uint64_t seed = 1;
  bool ClientSide() const { return drop > 0 || drop_reply > 0 || delay > 0; }
  bool ServerSide() const { return fail > 0; }
  // "drop=0.1,drop_reply=0,delay=0,delay_ms=20,fail=0,seed=1": ParseFaultSpec reads it back.
  std::string ToString() const;
};

FaultOptions FaultOptionsFromConfig(const FaultsConfig& c);
// Applies "key=value,..." over `base`; `where` starts every error, which names the bad item:
//   $GRADPRESS_FAULTS: item 'drop=2': drop must be a number in [0, 1]
FaultOptions ParseFaultSpec(const std::string& text, const std::string& where,
                            FaultOptions base = {});
// The config's faults, then $GRADPRESS_FAULTS (if set and non-empty) over them.
FaultOptions ResolveFaults(const FaultsConfig& c);
// A stream number for a name (FNV-1a), so injectors of different workers draw differently.
uint64_t StreamOf(const std::string& name);

class FaultInjector {
 public:
  explicit FaultInjector(FaultOptions options, uint64_t stream = 0);
  struct Attempt {
    bool drop = false;
    bool drop_reply = false;
    int delay_ms = 0;  // sleep this long first
  };
  Attempt NextAttempt();
  bool NextFail();
  uint64_t injected() const { return injected_.load(std::memory_order_relaxed); }
  const FaultOptions& options() const { return options_; }

 private:
  double Uniform();  // mu_ held; in [0, 1)
  const FaultOptions options_;
  std::mutex mu_;
  std::mt19937_64 rng_;
  std::atomic<uint64_t> injected_{0};
};

}  // namespace gradpress::transport
