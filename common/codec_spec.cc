#include "common/codec_spec.h"

#include <yaml-cpp/yaml.h>

#include <set>
#include <sstream>

#include "common/config_schema.h"
#include "common/error.h"
#include "common/strings.h"
#include "common/yaml_source.h"

namespace gradpress {

std::string CodecSpec::ToString() const {
  std::ostringstream os;
  os << codec;
  if (!params.empty()) {
    os << "(";
    bool first = true;
    for (const auto& [k, v] : params) {
      os << (first ? "" : ",") << k << "=" << v;
      first = false;
    }
    os << ")";
  }
  if (then) os << "+" << then->ToString();
  if (error_feedback) os << "+ef";
  return os.str();
}

std::string CodecSpec::ToShorthand() const {
  std::string s = codec;
  if (error_feedback) s += " error_feedback=true";
  for (const auto& [k, v] : params) s += " " + k + "=" + v;
  if (then) s += " then=" + then->ToShorthand();
  return s;
}

bool operator==(const CodecSpec& a, const CodecSpec& b) {
  if (a.codec != b.codec || a.params != b.params || a.error_feedback != b.error_feedback) {
    return false;
  }
  if (!a.then || !b.then) return !a.then && !b.then;
  return *a.then == *b.then;
}
bool operator!=(const CodecSpec& a, const CodecSpec& b) { return !(a == b); }

CodecSpec ParseCodecSpec(const YAML::Node& node, const std::string& key, const YamlSource& src) {
  CodecSpec spec;
  spec.line = src.is_override ? 0 : node.Mark().line + 1;
  if (node.IsScalar()) {
    spec.codec = node.Scalar();
  } else if (node.IsMap()) {
    spec.codec.clear();
    std::set<std::string> seen;
    for (const auto& kv : node) {
      const std::string full = YamlKey(kv.first, key, src, &seen);
      const std::string name = kv.first.Scalar();
      const std::string where = src.AtKey(kv.second, full);
      if (name == "then") {
        spec.then = kv.second.IsNull()
                        ? nullptr
                        : std::make_shared<CodecSpec>(ParseCodecSpec(kv.second, full, src));
      } else if (name == "codec") {
        spec.codec = YamlScalar(kv.second, where);
      } else if (name == "error_feedback") {
        spec.error_feedback = detail::ParseBoolValue(YamlScalar(kv.second, where), where);
      } else {
        spec.params[name] = YamlScalar(kv.second, where);
      }
    }
  } else {
    throw InvalidArgument(src.AtKey(node, key) +
                          ": expected a codec block like {codec: qsgd, levels: 16}, got " +
                          DescribeYaml(node));
  }
  if (Trim(spec.codec).empty()) {
    throw InvalidArgument(src.AtKey(node, key) + ": missing 'codec' (e.g. codec: topk)");
  }
  return spec;
}

namespace {

// Reads one level from `is`; its first token (already read) is `codec`.
CodecSpec ShorthandLevel(std::istringstream& is, std::string codec, const std::string& text) {
  CodecSpec spec;
  spec.codec = std::move(codec);
  std::string kv;
  while (is >> kv) {
    const auto eq = kv.find('=');
    GP_ENFORCE(eq != std::string::npos && eq > 0, "codec spec '", text,
               "': expected key=value, got '", kv, "'");
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "then") {
      GP_ENFORCE(!value.empty(), "codec spec '", text, "': then= needs a codec, e.g. then=qsgd");
      spec.then = std::make_shared<CodecSpec>(ShorthandLevel(is, value, text));
    } else if (key == "error_feedback") {
      spec.error_feedback = detail::ParseBoolValue(value, "codec spec '" + text + "'");
    } else {
      spec.params[key] = value;
    }
  }
  return spec;
}

}  // namespace

CodecSpec ParseCodecShorthand(const std::string& text) {
  std::istringstream is(text);
  std::string codec;
  GP_ENFORCE(static_cast<bool>(is >> codec), "empty codec spec");
  GP_ENFORCE(codec.find('=') == std::string::npos, "codec spec '", text,
             "': starts with a codec name, e.g. 'topk ratio=0.01'");
  return ShorthandLevel(is, codec, text);
}

void EmitCodecSpec(YAML::Emitter& out, const CodecSpec& spec) {
  out << YAML::Flow << YAML::BeginMap << YAML::Key << "codec" << YAML::Value << spec.codec;
  for (const auto& [k, v] : spec.params) out << YAML::Key << k << YAML::Value << v;
  if (spec.then) {
    out << YAML::Key << "then" << YAML::Value;
    EmitCodecSpec(out, *spec.then);
  }
  if (spec.error_feedback) out << YAML::Key << "error_feedback" << YAML::Value << true;
  out << YAML::EndMap;
}

}  // namespace gradpress
