#include "plan/accuracy.h"

#include <yaml-cpp/yaml.h>

#include <fstream>

#include "common/error.h"

namespace gradpress::plan {

std::vector<AccuracyPoint> ReadAccuracy(const std::string& run_dir) {
  const std::string path = run_dir + "/metrics.jsonl";
  std::ifstream in(path);
  GP_ENFORCE(in.good(), "--accuracy: cannot read '", path, "'");
  std::vector<AccuracyPoint> out;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.find("\"epoch_s\"") == std::string::npos) continue;  // steps and other lines
    try {
      const YAML::Node n = YAML::Load(line);  // a JSON line is YAML
      if (n["rank"].as<int>(0) != 0) continue;
      out.push_back({n["step"].as<int64_t>(), n["test_acc"].as<double>()});
    } catch (const YAML::Exception& e) {
      throw InvalidArgument(path + ":" + std::to_string(line_no) + ": not a metrics line (" +
                            e.what() + ")");
    }
  }
  GP_ENFORCE(!out.empty(), path, " has no epoch line of rank 0 (test_acc): is it a finished run?");
  return out;
}

std::optional<int64_t> StepsToAccuracy(const std::vector<AccuracyPoint>& curve, double target) {
  for (const AccuracyPoint& p : curve)
    if (p.test_acc >= target) return p.step;
  return std::nullopt;
}

}  // namespace gradpress::plan
