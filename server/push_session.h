#pragma once
// PushState (ParameterStore::PushSession::State): one streamed push while it arrives, is
// checked and lands. Private to the store's push files (parameter_store_push.cc: arrival and
// checks; parameter_store_landing.cc: where it lands and the commit that counts it).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "server/payload_check.h"
#include "server/store_state.h"

namespace gradpress::server {

struct PushState {
  StoreState* store = nullptr;
  Lane* lane = nullptr;  // the bucket this push carries
  WorkerId w;
  int64_t step = 0, base_step = 0;
  Clock::time_point deadline;
  std::optional<double> lr;    // exchange=weights: the SGD step's learning rate
  std::vector<double> key_lr;  // per key of the lane, replacing lr (empty: lr for all)
  bool in_call = false;        // Membership::Enter'ed (a worker inside a call is alive)
  bool in_flight = false;      // in lane->in_flight
  bool duplicate = false;      // acknowledged, its pieces ignored
  bool has_early = false;      // async duplicate: `early` is the answer
  PushPullResult early;
  bool committed = false;
  bool owner = false;               // writes straight into the accumulator
  std::unique_ptr<Buffer> staging;  // or into this (a dense key of a later push)
  std::vector<float*> dst;          // per key of the lane: where its floats go (empty: none yet)
  // The lane's keys as they arrive (server/payload_check.h). A sparse codec in sync mode is
  // decoded to (idx, val) at Commit and assigned (owner) or added into the accumulator from
  // them, never through a dense buffer; "none" bytes are copied into dst as they arrive.
  std::vector<PayloadIn> keys;
  size_t last = 0;  // key of the previous piece (model index)
  uint64_t bytes = 0;
  double apply_ms = 0;
};

}  // namespace gradpress::server
