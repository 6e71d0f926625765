// Time to accuracy (plan/accuracy.h, plan/report.h): a run's epoch lines, the first epoch
// end at the target, and the report's time = steps x predicted step.
#include "plan/accuracy.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "plan/report.h"

namespace gradpress::plan {
namespace {

std::string RunDir(const std::string& name, const std::string& lines) {
  const auto dir = std::filesystem::temp_directory_path() / ("gp_plan_acc_" + name);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "metrics.jsonl") << lines;
  return dir.string();
}

TEST_CASE("accuracy: rank 0's epoch ends, the first at the target") {
  const std::string dir =
      RunDir("ok",
             "{\"rank\": 0, \"step\": 0, \"loss\": 2.3, \"bytes_up\": 10, \"step_ms\": 5}\n"
             "{\"rank\": 1, \"epoch\": 0, \"step\": 100, \"test_acc\": 0.9, \"epoch_s\": 1}\n"
             "{\"rank\": 0, \"epoch\": 0, \"step\": 100, \"test_acc\": 0.7, \"epoch_s\": 1}\n"
             "{\"rank\": 0, \"epoch\": 1, \"step\": 200, \"test_acc\": 0.82, \"epoch_s\": 1}\n"
             "{\"rank\": 0, \"epoch\": 2, \"step\": 300, \"test_acc\": 0.86, \"epoch_s\": 1}\n");
  const auto curve = ReadAccuracy(dir);
  REQUIRE(curve.size() == 3);
  CHECK(StepsToAccuracy(curve, 0.8) == std::optional<int64_t>(200));
  CHECK(StepsToAccuracy(curve, 0.86) == std::optional<int64_t>(300));
  CHECK_FALSE(StepsToAccuracy(curve, 0.9).has_value());
}

TEST_CASE("accuracy: a run without epoch lines, or a broken line, is named") {
  CHECK_THROWS_WITH(ReadAccuracy(RunDir("none", "{\"rank\": 0, \"step\": 0}\n")),
                    Catch::Contains("no epoch line of rank 0"));
  CHECK_THROWS_WITH(ReadAccuracy(RunDir("bad", "{\"epoch_s\": [\n")),
                    Catch::Contains("metrics.jsonl:1: not a metrics line"));
  CHECK_THROWS_WITH(ReadAccuracy("/nonexistent/run"), Catch::Contains("cannot read"));
}

TEST_CASE("report: time to the target is the run's steps times the predicted step") {
  Calibration c;
  c.method = "m";
  c.forward_ms = 4;
  c.backward_ms = 6;
  BucketProfile b;
  b.ready_ms = 6;
  c.buckets = {b};
  Cluster k;
  k.workers = 1;
  AccuracyTarget acc;
  acc.target_acc = 0.8;
  acc.steps = {std::optional<int64_t>(200)};
  const std::string json = Report({c}, k, {1}, /*json=*/true, acc);
  CHECK(json.find("\"steps_to_target\": 200") != std::string::npos);
  INFO(json);
  CHECK(json.find("\"time_to_target_s\": 2}") != std::string::npos);  // 200 x 10 ms
  acc.steps = {std::nullopt};
  CHECK(Report({c}, k, {1}, false, acc).find("not reached") != std::string::npos);
  acc.steps = {};
  acc.steps.resize(2);
  CHECK_THROWS_WITH(Report({c}, k, {1}, false, acc), Catch::Contains("give one per method"));
}

TEST_CASE("report: with a target, the suggestion and crossover are in time to it") {
  // "fast" steps in 10 ms but needs 3x the steps of "slow", which steps in 20 ms.
  auto method = [](const char* name, double backward) {
    Calibration c;
    c.method = name;
    c.backward_ms = backward;
    BucketProfile b;
    b.ready_ms = backward;
    c.buckets = {b};
    return c;
  };
  const Calibration slow = method("slow", 20), fast = method("fast", 10);
  Cluster k;
  k.workers = 1;
  AccuracyTarget acc;
  acc.target_acc = 0.9;
  acc.steps = {std::optional<int64_t>(100), std::optional<int64_t>(300)};
  const std::string s = Suggest({slow, fast}, k, acc);
  INFO(s);
  CHECK(s.find("'slow' reaches 0.9 first: 2.0 s (100 steps of 20.0 ms)") != std::string::npos);
  CHECK(Suggest({slow, fast}, k).find("'fast' is fastest") != std::string::npos);
  acc.steps = {std::nullopt, std::optional<int64_t>(300)};
  CHECK(Suggest({slow, fast}, k, acc).find("'slow' (its run never reached 0.9)") !=
        std::string::npos);
}

}  // namespace
}  // namespace gradpress::plan
