#include "compressors/compressor_config.h"

#include <cerrno>
#include <cstdlib>

#include "common/error.h"

namespace gradpress::compressors {

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
