#include "common/yaml_source.h"

#include <yaml-cpp/yaml.h>

#include "common/error.h"

namespace gradpress {

std::string YamlSource::At(const YAML::Node& node) const {
  return is_override ? name : name + ":" + std::to_string(node.Mark().line + 1);
}

std::string YamlSource::AtKey(const YAML::Node& node, const std::string& key) const {
  return is_override ? name : At(node) + ": " + key;
}

std::string DescribeYaml(const YAML::Node& node) {
  if (node.IsMap()) return "a mapping";
  if (node.IsSequence()) return "a list";
  if (node.IsScalar()) return "'" + node.Scalar() + "'";
  return "nothing";
}

std::string YamlScalar(const YAML::Node& value, const std::string& where) {
  if (!value.IsScalar()) {
    throw InvalidArgument(where + ": expected a value, got " + DescribeYaml(value));
  }
  return value.Scalar();
}

std::string YamlKey(const YAML::Node& key_node, const std::string& prefix, const YamlSource& src,
                    std::set<std::string>* seen) {
  if (!key_node.IsScalar()) throw InvalidArgument(src.At(key_node) + ": keys must be names");
  const std::string key = prefix.empty() ? key_node.Scalar() : prefix + "." + key_node.Scalar();
  if (!seen->insert(key).second) {
    throw InvalidArgument(src.At(key_node) + ": duplicate key '" + key + "'");
  }
  return key;
}

}  // namespace gradpress
