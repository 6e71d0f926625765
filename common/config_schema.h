#pragma once
// Internal to common/config*.cc: the table of config keys (type, range, default lives in
// config.h) and the scalar parsers shared by the YAML reader, the overrides and the
// environment fallbacks of ResolveIdentity.
//
//   Config c;  std::vector<ConfigField> fields = ConfigFields(c);
//   FindField(fields, "train.lr")->set("0.05", "--set train.lr=0.05");   // writes c.train.lr
//
// `where` starts every error message: "config.yaml:9: train.lr" or "--set train.lr=abc".
// Thread-safety: the fields write into the Config they were made from.
#include <functional>
#include <string>
#include <vector>

#include "common/config.h"

namespace gradpress::detail {

struct ConfigField {
  std::string key;                                                            // "train.lr"
  std::function<void(const std::string& raw, const std::string& where)> set;  // parse, check
  std::function<std::string()> get;  // scalar text that `set` reads back to the same value
  CodecSpec* codec = nullptr;        // push / pull: a codec block instead of a scalar
  bool list = false;                 // a YAML list is read as its items joined by ","
};

// The keys of `config` in the order ToYaml writes them; the functions refer to `config`.
std::vector<ConfigField> ConfigFields(Config& config);
ConfigField* FindField(std::vector<ConfigField>& fields, const std::string& key);
// True for "train", "dataset", ...: a key with keys below it that is not a codec block.
bool IsSection(const std::vector<ConfigField>& fields, const std::string& key);
// "unknown key 'train.learning_rate'; did you mean 'train.lr'?", or the valid keys of the
// section when nothing is close.
std::string UnknownKeyMessage(const std::vector<ConfigField>& fields, const std::string& key);

// The checks after the file and every override: codec blocks name a codec, cross-key rules.
void ValidateConfig(const Config& config);

int ParseIntValue(const std::string& raw, const std::string& where, long long lo, long long hi);
bool ParseBoolValue(const std::string& raw, const std::string& where);
// host:port with a port in [min_port, 65535].
void CheckHostPort(const std::string& raw, const std::string& where, int min_port);

}  // namespace gradpress::detail
