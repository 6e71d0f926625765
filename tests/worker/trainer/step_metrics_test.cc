// StepMetrics' merge rules and its one serialiser (worker/client/step_metrics.h): every reported
// field reaches metrics.jsonl, the dashboard's row and summary.json by its name.
#include "worker/client/step_metrics.h"

#include <catch2/catch.hpp>
#include <string>

#include "common/json_line.h"
#include "proto/gradpress.pb.h"

namespace gradpress {
namespace {

using worker::Concurrency;
using worker::StepMetrics;

StepMetrics Call(uint64_t up, double network_ms, double encode_ms, int64_t server_step) {
  StepMetrics m;
  m.bytes_up = up;
  m.network_ms = network_ms;
  m.encode_ms = encode_ms;
  m.server_step = server_step;
  m.retries = 1;
  return m;
}

TEST_CASE("step metrics: shards' calls add bytes and CPU time, take the longest wall time",
          "[metrics]") {
  StepMetrics all;
  worker::Merge(Call(100, 5, 1, 7), Concurrency::kParallel, &all, /*first=*/true);
  worker::Merge(Call(50, 9, 2, 6), Concurrency::kParallel, &all);
  CHECK(all.bytes_up == 150);
  CHECK(all.network_ms == 9);
  CHECK(all.encode_ms == 3);
  CHECK(all.server_step == 6);  // the call is as far as its slowest shard
  CHECK(all.retries == 2);
}

TEST_CASE("step metrics: a step's buckets add everything up", "[metrics]") {
  StepMetrics all;
  worker::Merge(Call(100, 5, 1, 7), Concurrency::kSerial, &all);
  worker::Merge(Call(50, 9, 2, 8), Concurrency::kSerial, &all);
  CHECK(all.bytes_up == 150);
  CHECK(all.network_ms == 14);
  CHECK(all.encode_ms == 3);
  CHECK(all.server_step == 8);
}

TEST_CASE("step metrics: every reported field reaches every output by name", "[metrics]") {
  StepMetrics m;
  m.step = 12;
  m.loss = 0.5;
  m.bytes_up = 1000;
  m.bytes_down = 2000;
  m.compute_ms = 1.25;
  m.encode_ms = 2.25;
  m.decode_ms = 3.25;
  m.network_ms = 4.25;
  m.wait_ms = 5.25;
  m.server_ms = 6.25;
  m.exposed_comm_ms = 7.25;
  m.step_ms = 8.25;
  m.retries = 3;
  JsonLine line;
  worker::WriteStep(1, m, &line);
  const std::string json = line.Done();
  const proto::WorkerRow row = worker::StepRow(1, m);
  worker::MetricTotals totals;
  totals.Add(m);
  totals.Add(m);
  JsonLine summary;
  worker::WriteSummaryFields(totals, &summary);
  const std::string sum = summary.Done();
  const auto* d = row.GetDescriptor();
  for (const worker::MetricField& f : worker::ReportedFields()) {
    INFO(f.name);
    CHECK(json.find("\"" + std::string(f.name) + "\": ") != std::string::npos);
    const auto* field = d->FindFieldByName(f.name);
    REQUIRE(field != nullptr);
    double v = 0;
    if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_DOUBLE)
      v = row.GetReflection()->GetDouble(row, field);
    else if (field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_UINT64)
      v = static_cast<double>(row.GetReflection()->GetUInt64(row, field));
    else
      v = row.GetReflection()->GetInt32(row, field);
    CHECK(v == f.get(m));
    if (f.summary != worker::MetricField::kNone)
      CHECK(sum.find("\"" + std::string(f.name) + "\": ") != std::string::npos);
    if (f.summary == worker::MetricField::kMean) CHECK(totals.Mean(f.name) == f.get(m));
    if (f.summary == worker::MetricField::kTotal) CHECK(totals.Sum(f.name) == 2 * f.get(m));
  }
  CHECK(json.find("\"step\": 12") != std::string::npos);
  CHECK(row.step() == 12);
}

}  // namespace
}  // namespace gradpress
