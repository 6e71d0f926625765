#pragma once
// StepMetrics: what one step measured, the one type every stage fills. A client call returns
// one (bytes, encode/decode/network/wait/server times, the server's step); the bucket
// scheduler and the sharded client merge several calls' into one; the Trainer adds compute,
// loss and step time; the serialisers below write it to metrics.jsonl, summary.json (means per
// step), the dashboard's rows and `scripts/run.sh --table` (which prints summary.json's
// *_ms fields). Each reported field is one line of kMetricFields (step_metrics.cc): adding a
// metric is a member here and a line there.
//
//   StepMetrics all;  Merge(shard_call, Concurrency::kParallel, &all);
//   JsonLine line;  WriteStep(m, &line);    // metrics.jsonl's step line
//
// Thread-safety: values.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace gradpress {
class JsonLine;
}
namespace gradpress::proto {
class WorkerRow;
}

namespace gradpress::worker {

struct StepMetrics {
  int64_t step = 0;
  double loss = 0;                        // this worker's batch mean, before the update
  int64_t correct = 0;                    // correct predictions in the batch (train accuracy)
  uint64_t bytes_up = 0, bytes_down = 0;  // payload bytes pushed and received
  double compute_ms = 0;                  // forward + backward + local optimizer step
  double encode_ms = 0, decode_ms = 0;
  double network_ms = 0;  // call wall time - wait_ms - server_ms
  double wait_ms = 0;     // barrier wait on the server
  double server_ms = 0;   // the server's decode + aggregate + encode of this step's result
  // Time the step waited on communication after backward ended (the exchange's wall time for
  // the serial step); overlap: the pipelined step ran.
  double exposed_comm_ms = 0;
  double step_ms = 0;  // wall time of the whole step
  int retries = 0;     // RPC attempts retried (UNAVAILABLE, injected faults)
  bool overlap = false;
  bool stale = false;       // async: the push was refused as too stale (dropped)
  int64_t server_step = 0;  // a call's: the step of the received result
  int contributors = 0;     // a call's: workers in the result
  bool duplicate = false;   // a call's: the server had applied this push already
};

// How several calls' metrics combine: kParallel, calls that ran at once (a call's shards):
// bytes, retries and CPU times add up, wall times are the longest one's; kSerial, calls one
// after another or overlapping a step (its buckets): everything adds up.
enum class Concurrency { kParallel, kSerial };
// Adds `part` into `*into`; first: `into` holds nothing yet.
void Merge(const StepMetrics& part, Concurrency how, StepMetrics* into, bool first = false);

// The reported fields (metrics.jsonl, the dashboard's rows, summary.json), by name. Integer
// fields are written as integers; optional ones only when non-zero; summary.json holds each
// field's mean per step (kMean), its total (kTotal) or nothing (kNone: bytes, written as
// bytes_*_per_step and ratios by the Trainer).
struct MetricField {
  enum Summary { kMean, kTotal, kNone };
  const char* name;
  bool integer;
  bool optional;
  Summary summary;
  double (*get)(const StepMetrics&);
};
const std::vector<MetricField>& ReportedFields();

// metrics.jsonl's step line: rank, step, every reported field, overlap.
void WriteStep(int rank, const StepMetrics& m, JsonLine* line);
// The dashboard's row of the step (the worker's next push carries it).
proto::WorkerRow StepRow(int rank, const StepMetrics& m);
// Sums of the reported fields over steps, and their means per step for summary.json.
struct MetricTotals {
  int64_t steps = 0;
  std::map<std::string, double> sums;  // by field name
  void Add(const StepMetrics& m);
  double Mean(const std::string& field) const;
  double Sum(const std::string& field) const;
};
// summary.json's fields of the steps: each reported field's mean or total (MetricField).
void WriteSummaryFields(const MetricTotals& t, JsonLine* line);

}  // namespace gradpress::worker
