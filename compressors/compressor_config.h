#pragma once
// How codec factories read a CodecSpec (common/codec_spec.h: the one description of a codec,
// from YAML or shorthand): their parameters with defaults, types and ranges checked.
//
//   CodecSpec c = ParseCodecShorthand("topk ratio=0.01");
//   ParamReader r(c);  double ratio = r.Double("ratio", 0.01, 0.0, 1.0);  r.Finish();
//
// Finish() throws InvalidArgument naming any parameter the codec did not read, with the
// list of those it knows, so a typo ("ratoi") is an error, never a silent default.
// Thread-safety: values.
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/codec_spec.h"

namespace gradpress::compressors {

// Whether a tensor of this shape uses the configured codec: tensors under min_numel elements,
// and 1-D ones (bias, BatchNorm) when skip_1d, travel uncompressed ("none").
bool TravelsCompressed(const std::vector<int64_t>& shape, int64_t min_numel, bool skip_1d);

class ParamReader {
 public:
  explicit ParamReader(const CodecSpec& config) : config_(config) {}
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
  const CodecSpec& config_;
  std::set<std::string> known_;
};

}  // namespace gradpress::compressors
