#pragma once
// Where a piece of YAML came from, for error messages: a file ("config.yaml:7: train.lr") or
// one override ("--set push={...}", which already names its key), and the small checks every
// YAML reader here shares (a scalar where one is expected, no repeated keys).
//
//   const YamlSource src{"config.yaml", false};
//   const std::string key = YamlKey(kv.first, "train", src, &seen);   // "train.lr"
//   const std::string v = YamlScalar(kv.second, src.AtKey(kv.second, key));
//
// Thread-safety: values.
#include <set>
#include <string>

namespace YAML {
class Node;
}

namespace gradpress {

struct YamlSource {
  std::string name;          // file name, or the whole override ("--set push.ratio=0.1")
  bool is_override = false;  // an override has no lines worth naming

  // "config.yaml:7", or the override.
  std::string At(const YAML::Node& node) const;
  // "config.yaml:7: train.lr", or the override, which already names the key.
  std::string AtKey(const YAML::Node& node, const std::string& key) const;
};

// "a mapping", "a list", "'text'", "nothing": what a node holds, for "expected ..., got ...".
std::string DescribeYaml(const YAML::Node& node);
// The scalar text of `value`; InvalidArgument naming `where` when it is not a scalar.
std::string YamlScalar(const YAML::Node& value, const std::string& where);
// The dotted key of a mapping entry ("train" + "lr" -> "train.lr"); a repeated key is an
// InvalidArgument, never a silent overwrite.
std::string YamlKey(const YAML::Node& key_node, const std::string& prefix, const YamlSource& src,
                    std::set<std::string>* seen);

}  // namespace gradpress
