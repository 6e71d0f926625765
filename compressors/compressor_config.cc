#include "compressors/compressor_config.h"

#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "common/error.h"

namespace gradpress::compressors {

std::string CompressorConfig::ToString() const {
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

CompressorConfig ParseCompressorConfig(const YAML::Node& node, const std::string& where) {
  GP_ENFORCE(node.IsMap(), where, ": a codec is a mapping like {codec: qsgd, levels: 16}");
  CompressorConfig c;
  bool has_codec = false;
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const YAML::Node& v = kv.second;
    const std::string at = where + "." + key + " (line " + std::to_string(v.Mark().line + 1) + ")";
    if (key == "then") {
      c.then = std::make_shared<CompressorConfig>(ParseCompressorConfig(v, where + ".then"));
      continue;
    }
    GP_ENFORCE(v.IsScalar(), at, ": expected a scalar value");
    if (key == "codec") {
      c.codec = v.Scalar();
      has_codec = true;
    } else if (key == "error_feedback") {
      try {
        c.error_feedback = v.as<bool>();
      } catch (const YAML::Exception&) {
        throw InvalidArgument(at + ": expected true or false, got '" + v.Scalar() + "'");
      }
    } else {
      c.params[key] = v.Scalar();
    }
  }
  GP_ENFORCE(has_codec, where, ": missing 'codec' (e.g. codec: topk)");
  return c;
}

CompressorConfig ParseCompressorSpec(const std::string& spec) {
  std::istringstream is(spec);
  CompressorConfig c;
  GP_ENFORCE(static_cast<bool>(is >> c.codec), "empty codec spec");
  std::string kv;
  while (is >> kv) {
    const auto eq = kv.find('=');
    GP_ENFORCE(eq != std::string::npos && eq > 0, "codec spec '", spec,
               "': expected key=value, got '", kv, "'");
    const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "error_feedback") {
      c.error_feedback = value == "true" || value == "1";
    } else {
      c.params[key] = value;
    }
  }
  return c;
}

CompressorConfig FromCodecSpec(const CodecSpec& spec) {
  CompressorConfig c;
  c.codec = spec.codec;
  c.params = spec.params;
  c.error_feedback = spec.error_feedback;
  if (spec.then) c.then = std::make_shared<CompressorConfig>(FromCodecSpec(*spec.then));
  return c;
}

bool TravelsCompressed(const std::vector<int64_t>& shape, int64_t min_numel, bool skip_1d) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n >= min_numel && !(skip_1d && shape.size() == 1);
}

const std::string* ParamReader::Raw(const std::string& key) {
  known_.insert(key);
  auto it = config_.params.find(key);
  return it == config_.params.end() ? nullptr : &it->second;
}

double ParamReader::Double(const std::string& key, double def, double lo, double hi) {
  const std::string* raw = Raw(key);
  if (!raw) return def;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(raw->c_str(), &end);
  GP_ENFORCE(!raw->empty() && *end == '\0' && errno == 0, config_.codec, ".", key,
             ": expected a number, got '", *raw, "'");
  GP_ENFORCE(v >= lo && v <= hi, config_.codec, ".", key, " = ", v, " is outside [", lo, ", ", hi,
             "]");
  return v;
}

int64_t ParamReader::Int(const std::string& key, int64_t def, int64_t lo, int64_t hi) {
  const std::string* raw = Raw(key);
  if (!raw) return def;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(raw->c_str(), &end, 10);
  GP_ENFORCE(!raw->empty() && *end == '\0' && errno == 0, config_.codec, ".", key,
             ": expected an integer, got '", *raw, "'");
  GP_ENFORCE(v >= lo && v <= hi, config_.codec, ".", key, " = ", v, " is outside [", lo, ", ", hi,
             "]");
  return v;
}

bool ParamReader::Bool(const std::string& key, bool def) {
  const std::string* raw = Raw(key);
  if (!raw) return def;
  if (*raw == "true" || *raw == "on" || *raw == "yes" || *raw == "1") return true;
  if (*raw == "false" || *raw == "off" || *raw == "no" || *raw == "0") return false;
  throw InvalidArgument(config_.codec + "." + key + ": expected true or false, got '" + *raw + "'");
}

std::string ParamReader::Choice(const std::string& key, const std::string& def,
                                const std::set<std::string>& choices) {
  const std::string* raw = Raw(key);
  if (!raw) return def;
  if (choices.count(*raw)) return *raw;
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : ", ") + c;
  throw InvalidArgument(config_.codec + "." + key + ": '" + *raw + "' is not one of " + list);
}

void ParamReader::Finish() const {
  for (const auto& [key, value] : config_.params) {
    if (known_.count(key)) continue;
    std::string list;
    for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
    throw InvalidArgument("codec '" + config_.codec + "' has no parameter '" + key +
                          "'; it knows: " + (list.empty() ? "(none)" : list));
  }
}

}  // namespace gradpress::compressors
