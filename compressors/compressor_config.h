#pragma once
// What a YAML `push:` or `pull:` block says about a codec, and a reader that codec
// factories use to take their parameters with defaults, types and ranges checked.
//
//   {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
//
//   CompressorConfig c = ParseCompressorConfig(node);      // from yaml-cpp
//   ParamReader r(c);  double ratio = r.Double("ratio", 0.01, 0.0, 1.0);  r.Finish();
//
// Finish() throws InvalidArgument naming any parameter the codec did not read, with the
// list of those it knows, so a typo ("ratoi") is an error, never a silent default.
// Thread-safety: values.
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/config.h"

namespace YAML {
class Node;
}

namespace gradpress::compressors {

struct CompressorConfig {
  std::string codec = "none";
  std::map<std::string, std::string> params;  // codec parameters, as YAML scalars
  bool error_feedback = false;
  std::shared_ptr<CompressorConfig> then;  // quantizer of a sparsifier's values

  // "topk(ratio=0.01)+qsgd(levels=16)", for logs and bench rows.
  std::string ToString() const;
};

// Parses a mapping; `where` names it in errors ("push", "pull", "config.yaml:12").
CompressorConfig ParseCompressorConfig(const YAML::Node& node, const std::string& where = "codec");
// Parses "codec key=value key=value" (CLI and bench shorthand).
CompressorConfig ParseCompressorSpec(const std::string& spec);
// Converts a `push:` / `pull:` block of the experiment config (common/config.h), `then`
// included. Parameters are checked later, by MakeCompressor.
CompressorConfig FromCodecSpec(const CodecSpec& spec);

// Whether a tensor of this shape uses the configured codec: tensors under min_numel elements,
// and 1-D ones (bias, BatchNorm) when skip_1d, travel uncompressed ("none").
bool TravelsCompressed(const std::vector<int64_t>& shape, int64_t min_numel, bool skip_1d);

class ParamReader {
 public:
  explicit ParamReader(const CompressorConfig& config) : config_(config) {}
  double Double(const std::string& key, double def, double lo, double hi);
  int64_t Int(const std::string& key, int64_t def, int64_t lo, int64_t hi);
  bool Bool(const std::string& key, bool def);
  // One of `choices`, e.g. {"l2", "max"}.
  std::string Choice(const std::string& key, const std::string& def,
                     const std::set<std::string>& choices);
  bool Has(const std::string& key) const { return config_.params.count(key) > 0; }
  void Finish() const;

 private:
  const std::string* Raw(const std::string& key);
  const CompressorConfig& config_;
  std::set<std::string> known_;
};

}  // namespace gradpress::compressors
