#include "common/config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include "common/config_schema.h"
#include "common/error.h"
#include "common/strings.h"
#include "common/yaml_source.h"

namespace gradpress {
namespace {

using detail::ConfigField;

// Override values may be quoted once: name="my run" reaches us as name="my run" from a script.
std::string Unquote(const std::string& raw) {
  const std::string s = Trim(raw);
  if (s.size() >= 2 && (s.front() == '"' || s.front() == '\'') && s.back() == s.front()) {
    return s.substr(1, s.size() - 2);
  }
  return s;
}

// model: {name: torchscript, path: m.pt}: the keys model and model_path.
void ApplyModelMap(const YAML::Node& value, std::vector<ConfigField>& fields,
                   const YamlSource& src) {
  std::set<std::string> seen;
  for (const auto& m : value) {
    const std::string sub = YamlKey(m.first, "model", src, &seen);
    if (sub != "model.name" && sub != "model.path")
      throw InvalidArgument(src.At(m.first) + ": unknown key '" + sub +
                            "'; model takes name and path");
    ConfigField* f = detail::FindField(fields, sub == "model.name" ? "model" : "model_path");
    const std::string where = src.AtKey(m.second, sub);
    f->set(YamlScalar(m.second, where), where);
  }
}

void ApplyMap(const YAML::Node& map, const std::string& prefix, std::vector<ConfigField>& fields,
              const YamlSource& src) {
  std::set<std::string> seen;
  for (const auto& kv : map) {
    const std::string key = YamlKey(kv.first, prefix, src, &seen);
    const YAML::Node& value = kv.second;
    if (key == "model" && value.IsMap()) {
      ApplyModelMap(value, fields, src);
      continue;
    }
    if (ConfigField* f = detail::FindField(fields, key)) {
      if (f->codec) {
        *f->codec = ParseCodecSpec(value, key, src);
      } else if (f->list && value.IsSequence()) {
        const std::string where = src.AtKey(value, key);
        std::string joined;
        for (const auto& item : value)
          joined += (joined.empty() ? "" : ",") + YamlScalar(item, where);
        f->set(joined, where);
      } else {
        const std::string where = src.AtKey(value, key);
        f->set(YamlScalar(value, where), where);
      }
    } else if (detail::IsSection(fields, key)) {
      if (value.IsNull()) continue;  // "train:" with nothing under it
      if (!value.IsMap()) {
        throw InvalidArgument(src.AtKey(value, key) + ": expected a mapping like " + key +
                              ": {...}, got " + DescribeYaml(value));
      }
      ApplyMap(value, key, fields, src);
    } else {
      throw InvalidArgument(src.At(kv.first) + ": " + detail::UnknownKeyMessage(fields, key));
    }
  }
}

YAML::Node LoadOverrideValue(const std::string& value, const YamlSource& src) {
  try {
    return YAML::Load(value);
  } catch (const YAML::Exception& e) {
    throw InvalidArgument(src.name + ": YAML syntax error: " + e.msg);
  }
}

// `rest` is what follows "push.": "ratio", "then.levels", "codec", "error_feedback", "then".
void ApplyCodecOverride(CodecSpec* spec, std::string rest, const std::string& key,
                        const std::string& value, const YamlSource& src) {
  while (rest.compare(0, 5, "then.") == 0) {
    if (!spec->then) {
      spec->then = std::make_shared<CodecSpec>();
      spec->then->codec.clear();  // must be named by another override; ValidateConfig checks
    }
    spec = spec->then.get();
    rest = rest.substr(5);
  }
  if (rest == "codec") {
    spec->codec = Unquote(value);
  } else if (rest == "error_feedback") {
    spec->error_feedback = detail::ParseBoolValue(value, src.name);
  } else if (rest == "then") {
    const YAML::Node node = LoadOverrideValue(value, src);
    spec->then =
        node.IsNull() ? nullptr : std::make_shared<CodecSpec>(ParseCodecSpec(node, key, src));
  } else if (rest.empty() || rest.find('.') != std::string::npos) {
    throw InvalidArgument(src.name + ": '" + key + "' is not a codec key or parameter");
  } else {
    spec->params[rest] = Unquote(value);
  }
}

void ApplyOverride(const std::string& text, std::vector<ConfigField>& fields) {
  const YamlSource src{"--set " + text, true};
  const auto eq = text.find('=');
  const std::string key = eq == std::string::npos ? "" : Trim(text.substr(0, eq));
  if (key.empty()) throw InvalidArgument(src.name + ": expected key=value (e.g. train.lr=0.05)");
  const std::string value = text.substr(eq + 1);
  if (key == "model" && Trim(value).rfind('{', 0) == 0) {
    const YAML::Node map = LoadOverrideValue(value, src);
    if (map.IsMap()) return ApplyModelMap(map, fields, src);
  }
  if (key == "model.name" || key == "model.path")
    return ApplyOverride((key == "model.name" ? "model=" : "model_path=") + value, fields);
  if (ConfigField* f = detail::FindField(fields, key)) {
    if (f->codec) {
      *f->codec = ParseCodecSpec(LoadOverrideValue(value, src), key, src);
    } else {
      f->set(Unquote(value), src.name);
    }
    return;
  }
  for (auto& f : fields) {
    if (f.codec && key.compare(0, f.key.size() + 1, f.key + ".") == 0) {
      ApplyCodecOverride(f.codec, key.substr(f.key.size() + 1), key, value, src);
      return;
    }
  }
  if (detail::IsSection(fields, key)) {
    throw InvalidArgument(src.name + ": '" + key + "' is a section; set one of its keys, e.g. " +
                          key + ".<key>=<value>");
  }
  throw InvalidArgument(src.name + ": " + detail::UnknownKeyMessage(fields, key));
}

// The first of `names` that is set and non-empty: {name, value}.
std::optional<std::pair<std::string, std::string>> FirstEnv(std::vector<const char*> names) {
  for (const char* name : names) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return std::make_pair(std::string(name), std::string(v));
  }
  return std::nullopt;
}

}  // namespace

bool operator==(const Config& a, const Config& b) { return ToYaml(a) == ToYaml(b); }
bool operator!=(const Config& a, const Config& b) { return !(a == b); }

Config ParseConfig(const std::string& yaml_text, const std::string& source_name,
                   const std::vector<std::string>& overrides) {
  Config config;
  std::vector<ConfigField> fields = detail::ConfigFields(config);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::ParserException& e) {
    throw InvalidArgument(source_name + ":" + std::to_string(e.mark.line + 1) +
                          ": YAML syntax error: " + e.msg);
  } catch (const YAML::Exception& e) {
    throw InvalidArgument(source_name + ": YAML error: " + e.what());
  }
  if (!root.IsNull()) {  // an empty file means all defaults
    if (!root.IsMap()) {
      throw InvalidArgument(source_name + ": expected a mapping of keys at the top, got " +
                            DescribeYaml(root));
    }
    ApplyMap(root, "", fields, YamlSource{source_name});
  }
  for (const auto& o : overrides) ApplyOverride(o, fields);
  detail::ValidateConfig(config);
  return config;
}

Config LoadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw InvalidArgument("cannot read config file '" + path + "': it is a directory");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InvalidArgument("cannot read config file '" + path + "': " + std::strerror(errno));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return ParseConfig(text.str(), path, overrides);
}

std::string ToYaml(const Config& config) {
  Config copy = config;
  YAML::Emitter out;
  out << YAML::BeginMap;
  std::string section;  // the open nested mapping, "" at the top
  for (const ConfigField& f : detail::ConfigFields(copy)) {
    const auto dot = f.key.find('.');
    const std::string s = dot == std::string::npos ? "" : f.key.substr(0, dot);
    if (s != section) {
      if (!section.empty()) out << YAML::EndMap;
      if (!s.empty()) out << YAML::Key << s << YAML::Value << YAML::BeginMap;
      section = s;
    }
    out << YAML::Key << f.key.substr(dot == std::string::npos ? 0 : dot + 1) << YAML::Value;
    if (f.codec) {
      EmitCodecSpec(out, *f.codec);
    } else {
      out << f.get();
    }
  }
  if (!section.empty()) out << YAML::EndMap;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void WriteResolvedConfig(const Config& config, const std::string& path) {
  const std::filesystem::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  const std::string text = ToYaml(config), tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  bool ok = f != nullptr && std::fwrite(text.data(), 1, text.size(), f) == text.size() &&
            std::fflush(f) == 0 && ::fsync(fileno(f)) == 0;
  const int err = errno;
  if (f != nullptr && std::fclose(f) != 0) ok = false;
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) ok = false;
  if (!ok) {
    std::remove(tmp.c_str());
    throw InvalidArgument("cannot write config '" + path +
                          "': " + std::strerror(err ? err : errno));
  }
}

std::string ConfigHash(const Config& config) {
  Config job = config;  // per-process transport settings are not part of the job
  job.security = SecurityConfig();
  job.faults = FaultsConfig();
  uint64_t h = 14695981039346656037ull;  // FNV-1a 64
  for (const unsigned char ch : ToYaml(job)) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

Identity ResolveIdentity(std::optional<int> rank_flag, std::optional<int> workers_flag,
                         std::optional<std::string> server_flag, const Config& config) {
  Identity id;
  std::string rank_from = "the default", workers_from = "cluster.workers";
  if (rank_flag) {
    rank_from = "--rank";
    id.rank = detail::ParseIntValue(std::to_string(*rank_flag), rank_from, 0, INT32_MAX);
  } else if (auto env = FirstEnv({"RANK", "SLURM_PROCID"})) {
    rank_from = "$" + env->first;
    id.rank = detail::ParseIntValue(env->second, rank_from, 0, INT32_MAX);
  }
  if (workers_flag) {
    workers_from = "--workers";
    id.workers = detail::ParseIntValue(std::to_string(*workers_flag), workers_from, 1, INT32_MAX);
  } else if (auto env = FirstEnv({"WORLD_SIZE", "SLURM_NTASKS"})) {
    workers_from = "$" + env->first;
    id.workers = detail::ParseIntValue(env->second, workers_from, 1, INT32_MAX);
  } else {
    id.workers =
        detail::ParseIntValue(std::to_string(config.cluster.workers), workers_from, 1, INT32_MAX);
  }
  if (server_flag) {
    detail::CheckHostPort(*server_flag, "--server", 1);
    id.server = *server_flag;
  } else if (auto env = FirstEnv({"GRADPRESS_SERVER"})) {
    detail::CheckHostPort(env->second, "$GRADPRESS_SERVER", 1);
    id.server = env->second;
  } else {
    detail::CheckHostPort(config.cluster.server, "cluster.server", 1);
    id.server = config.cluster.server;
  }
  if (id.rank >= id.workers) {
    throw InvalidArgument("rank " + std::to_string(id.rank) + " (from " + rank_from +
                          ") must be below the number of workers " + std::to_string(id.workers) +
                          " (from " + workers_from + ")");
  }
  return id;
}

void ResolveShard(std::optional<int> shard_flag, std::optional<int> shards_flag,
                  const Config& config, int* shard, int* shards) {
  std::string shard_from = "the default", shards_from = "cluster.servers";
  *shard = 0;
  *shards = std::max<int>(1, config.cluster.servers.size());
  if (shards_flag) {
    shards_from = "--shards";
    *shards = detail::ParseIntValue(std::to_string(*shards_flag), shards_from, 1, 4096);
  } else if (auto env = FirstEnv({"GRADPRESS_SHARDS"})) {
    shards_from = "$GRADPRESS_SHARDS";
    *shards = detail::ParseIntValue(env->second, shards_from, 1, 4096);
  }
  if (shard_flag) {
    shard_from = "--shard";
    *shard = detail::ParseIntValue(std::to_string(*shard_flag), shard_from, 0, INT32_MAX);
  } else if (auto env = FirstEnv({"GRADPRESS_SHARD"})) {
    shard_from = "$GRADPRESS_SHARD";
    *shard = detail::ParseIntValue(env->second, shard_from, 0, INT32_MAX);
  }
  if (*shard >= *shards) {
    throw InvalidArgument("shard " + std::to_string(*shard) + " (from " + shard_from +
                          ") must be below the number of shards " + std::to_string(*shards) +
                          " (from " + shards_from + ")");
  }
}

std::vector<std::string> ResolveServers(const Config& config) {
  if (auto env = FirstEnv({"GRADPRESS_SERVERS"})) {
    Config c;
    detail::ConfigField* f = nullptr;
    auto fields = detail::ConfigFields(c);
    f = detail::FindField(fields, "cluster.servers");
    f->set(env->second, "$GRADPRESS_SERVERS");
    return c.cluster.servers;
  }
  return config.cluster.servers;
}

}  // namespace gradpress
