#include "plan/calibration.h"

#include <yaml-cpp/yaml.h>

#include "common/codec_spec.h"
#include "common/error.h"

namespace gradpress::plan {

std::vector<Calibration> Calibrate(const Config& config, const std::vector<std::string>& methods,
                                   int steps) {
  std::vector<worker::CalibrationMethod> ms;
  for (const std::string& m : methods) {
    const CodecSpec push = m.empty() ? config.push : ParseCodecShorthand(m);
    const CodecSpec pull = m.empty() ? config.pull : ParseCodecShorthand(m);
    ms.push_back({m.empty() ? push.ToShorthand() : m, push, pull});
  }
  const worker::KeyCalibration k = worker::CalibrateKeys(config, ms, steps);
  std::vector<Calibration> out;
  for (size_t m = 0; m < ms.size(); ++m)
    out.push_back(
        worker::Assemble(k, std::vector<int>(k.keys(), static_cast<int>(m)), ms[m].label));
  return out;
}

std::string CalibrationYaml(const Calibration& c) {
  YAML::Emitter e;
  e << YAML::Flow << YAML::BeginMap << YAML::Key << "method" << YAML::Value << YAML::DoubleQuoted
    << c.method << YAML::Key << "forward_ms" << YAML::Value << c.forward_ms << YAML::Key
    << "backward_ms" << YAML::Value << c.backward_ms << YAML::Key << "optimizer_ms" << YAML::Value
    << c.optimizer_ms << YAML::Key << "buckets" << YAML::Value << YAML::BeginSeq;
  for (const BucketProfile& b : c.buckets) {
    e << YAML::BeginMap << YAML::Key << "ready_ms" << YAML::Value << b.ready_ms << YAML::Key
      << "encode_ms" << YAML::Value << b.encode_ms << YAML::Key << "decode_ms" << YAML::Value
      << b.decode_ms << YAML::Key << "push_ms" << YAML::Value << b.push_ms << YAML::Key
      << "finalize_ms" << YAML::Value << b.finalize_ms << YAML::Key << "bytes_up" << YAML::Value
      << b.bytes_up << YAML::Key << "bytes_down" << YAML::Value << b.bytes_down << YAML::Key
      << "dense_bytes" << YAML::Value << b.dense_bytes << YAML::EndMap;
  }
  e << YAML::EndSeq << YAML::EndMap;
  return e.c_str();
}

Calibration CalibrationFromYaml(const std::string& text) {
  Calibration c;
  try {
    const YAML::Node n = YAML::Load(text);
    c.method = n["method"].as<std::string>();
    c.forward_ms = n["forward_ms"].as<double>();
    c.backward_ms = n["backward_ms"].as<double>();
    c.optimizer_ms = n["optimizer_ms"].as<double>();
    for (const auto& b : n["buckets"]) {
      BucketProfile p;
      p.ready_ms = b["ready_ms"].as<double>();
      p.encode_ms = b["encode_ms"].as<double>();
      p.decode_ms = b["decode_ms"].as<double>();
      p.push_ms = b["push_ms"].as<double>();
      p.finalize_ms = b["finalize_ms"].as<double>();
      p.bytes_up = b["bytes_up"].as<int64_t>();
      p.bytes_down = b["bytes_down"].as<int64_t>();
      p.dense_bytes = b["dense_bytes"].as<int64_t>();
      c.buckets.push_back(p);
    }
  } catch (const YAML::Exception& e) {
    throw InvalidArgument(std::string("calibration: not a gradpress-plan calibration (") +
                          e.what() + ")");
  }
  return c;
}

}  // namespace gradpress::plan
