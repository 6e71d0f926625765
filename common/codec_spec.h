#pragma once
// A codec as a user describes it, the one description every part of gradpress uses: a config's
// `push:` / `pull:` block, the shorthand of the command line, the bench's rows and the dynamic
// ladder's rungs all become a CodecSpec, and compressors::MakeCompressor builds from it.
//
//   push: {codec: topk, ratio: 0.01, then: {codec: qsgd, levels: 16}, error_feedback: true}
//   CodecSpec s = ParseCodecShorthand("topk ratio=0.01 error_feedback=true then=qsgd levels=16");
//   s.ToString()    == "topk(ratio=0.01)+qsgd(levels=16)+ef"      (logs, bench rows)
//   s.ToShorthand() == "topk error_feedback=true ratio=0.01 then=qsgd levels=16"
//
// Parameters stay text here: the codec's factory checks names, types and ranges
// (compressors/compressor_config.h's ParamReader), so a typo is an error naming the codec.
// Thread-safety: values.
#include <map>
#include <memory>
#include <string>

namespace YAML {
class Emitter;
class Node;
}  // namespace YAML

namespace gradpress {

struct YamlSource;

struct CodecSpec {
  std::string codec = "none";
  std::map<std::string, std::string> params;  // every other key, as its YAML scalar text
  bool error_feedback = false;
  std::shared_ptr<CodecSpec> then;  // quantizer of a sparsifier's values, or null; copies of a
                                    // CodecSpec share it: replace it, never edit it in place
  int line = 0;                     // 1-based line of the block in its file; 0 if none

  // "topk(ratio=0.01)+qsgd(levels=16)+ef", for logs and bench rows.
  std::string ToString() const;
  // The shorthand ParseCodecShorthand reads back: "topk ratio=0.01 then=qsgd levels=16".
  std::string ToShorthand() const;
};
// Deep comparison of codec, params, error_feedback and then; `line` is ignored.
bool operator==(const CodecSpec& a, const CodecSpec& b);
bool operator!=(const CodecSpec& a, const CodecSpec& b);

// A codec block: a mapping, or a bare codec name as shorthand for {codec: name}. `key` is the
// block's dotted name ("push", "pull.then") and `src` where it came from, both for errors.
// Throws InvalidArgument (missing codec, a list where a value belongs, a repeated key, ...).
CodecSpec ParseCodecSpec(const YAML::Node& node, const std::string& key, const YamlSource& src);

// "codec key=value ... [then=codec key=value ...]": everything after then= describes the
// quantizer; error_feedback=true|false is the decorator. Throws InvalidArgument naming the
// spec on an empty spec, a token without '=', or an error_feedback that is not a boolean.
CodecSpec ParseCodecShorthand(const std::string& text);

// The block as a YAML flow mapping, keys in a fixed order (ParseCodecSpec reads it back).
void EmitCodecSpec(YAML::Emitter& out, const CodecSpec& spec);

}  // namespace gradpress
