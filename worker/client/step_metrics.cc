// StepMetrics' merge rules and serialisers (step_metrics.h).
#include "worker/client/step_metrics.h"

#include <algorithm>
#include <cmath>

#include "common/error.h"
#include "common/json_line.h"
#include "proto/gradpress.pb.h"

namespace gradpress::worker {

// The reported fields, in the order every output writes them.
#define GP_METRIC(member, integer, optional, summary)                      \
  MetricField {                                                            \
#member, integer, optional, MetricField::summary,                      \
        [](const StepMetrics& m) { return static_cast<double>(m.member); } \
  }
const std::vector<MetricField>& ReportedFields() {
  static const std::vector<MetricField> fields = {
      GP_METRIC(loss, false, false, kNone),       GP_METRIC(bytes_up, true, false, kNone),
      GP_METRIC(bytes_down, true, false, kNone),  GP_METRIC(compute_ms, false, false, kMean),
      GP_METRIC(encode_ms, false, false, kMean),  GP_METRIC(decode_ms, false, false, kMean),
      GP_METRIC(network_ms, false, false, kMean), GP_METRIC(wait_ms, false, false, kMean),
      GP_METRIC(server_ms, false, false, kMean),  GP_METRIC(exposed_comm_ms, false, false, kMean),
      GP_METRIC(step_ms, false, false, kMean),    GP_METRIC(retries, true, true, kTotal),
  };
  return fields;
}
#undef GP_METRIC

void Merge(const StepMetrics& part, Concurrency how, StepMetrics* into, bool first) {
  const bool parallel = how == Concurrency::kParallel;
  auto wall = [&](double a, double b) { return parallel ? std::max(a, b) : a + b; };
  into->bytes_up += part.bytes_up;
  into->bytes_down += part.bytes_down;
  into->encode_ms += part.encode_ms;  // CPU time: adds up either way
  into->decode_ms += part.decode_ms;
  into->compute_ms += part.compute_ms;
  into->network_ms = wall(into->network_ms, part.network_ms);
  into->wait_ms = wall(into->wait_ms, part.wait_ms);
  into->server_ms = wall(into->server_ms, part.server_ms);
  into->exposed_comm_ms = wall(into->exposed_comm_ms, part.exposed_comm_ms);
  into->retries += part.retries;
  into->overlap = into->overlap || part.overlap;
  into->stale = into->stale || part.stale;
  if (first) {
    into->server_step = part.server_step;
    into->contributors = part.contributors;
    into->duplicate = part.duplicate;
  } else if (parallel) {  // the shards' results of one step: the call is as far as its slowest
    into->server_step = std::min(into->server_step, part.server_step);
    into->contributors = std::min(into->contributors, part.contributors);
    into->duplicate = into->duplicate && part.duplicate;
  } else {
    into->server_step = std::max(into->server_step, part.server_step);
    into->contributors = std::max(into->contributors, part.contributors);
    into->duplicate = into->duplicate && part.duplicate;
  }
}

namespace {

void Put(const MetricField& f, double v, JsonLine* line) {
  if (f.integer)
    line->Int(f.name, static_cast<int64_t>(std::llround(v)));
  else
    line->Num(f.name, v);
}

}  // namespace

void WriteStep(int rank, const StepMetrics& m, JsonLine* line) {
  line->Int("rank", rank).Int("step", m.step);
  for (const MetricField& f : ReportedFields()) {
    const double v = f.get(m);
    if (!f.optional || v != 0) Put(f, v, line);
  }
  line->Bool("overlap", m.overlap);
}

proto::WorkerRow StepRow(int rank, const StepMetrics& m) {
  proto::WorkerRow r;
  r.set_kind(proto::WorkerRow::STEP);
  r.set_rank(rank);
  r.set_step(m.step);
  // By name: the row's field of each reported metric (proto/gradpress.proto, WorkerRow).
  const google::protobuf::Descriptor* d = r.GetDescriptor();
  const google::protobuf::Reflection* reflect = r.GetReflection();
  for (const MetricField& f : ReportedFields()) {
    const google::protobuf::FieldDescriptor* field = d->FindFieldByName(f.name);
    GP_ENFORCE_AS(Internal, field != nullptr, "WorkerRow has no field for metric ", f.name);
    const double v = f.get(m);
    switch (field->cpp_type()) {
      case google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE:
        reflect->SetDouble(&r, field, v);
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_UINT64:
        reflect->SetUInt64(&r, field, static_cast<uint64_t>(v));
        break;
      case google::protobuf::FieldDescriptor::CPPTYPE_INT32:
        reflect->SetInt32(&r, field, static_cast<int32_t>(v));
        break;
      default:
        throw Internal(std::string("WorkerRow field ") + f.name + " is not a number");
    }
  }
  return r;
}

void MetricTotals::Add(const StepMetrics& m) {
  ++steps;
  for (const MetricField& f : ReportedFields()) sums[f.name] += f.get(m);
}

double MetricTotals::Sum(const std::string& field) const {
  const auto it = sums.find(field);
  return it == sums.end() ? 0.0 : it->second;
}

double MetricTotals::Mean(const std::string& field) const {
  return Sum(field) / static_cast<double>(std::max<int64_t>(1, steps));
}

void WriteSummaryFields(const MetricTotals& t, JsonLine* line) {
  for (const MetricField& f : ReportedFields()) {
    if (f.summary == MetricField::kMean) line->Num(f.name, t.Mean(f.name));
    if (f.summary == MetricField::kTotal) Put(f, t.Sum(f.name), line);
  }
}

}  // namespace gradpress::worker
