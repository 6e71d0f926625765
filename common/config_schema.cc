#include "common/config_schema.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "common/error.h"
#include "common/strings.h"

namespace gradpress::detail {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Shortest text that strtod reads back to exactly `v`, so ToYaml shows 0.05, not 0.05000...,
// and 120, not 1.2e+02.
std::string FormatDouble(double v) {
  char buf[64];
  int precision = 1;
  for (; precision < 17; ++precision) {
    std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  const double a = std::fabs(v);
  if (a >= 1 && a < 1e15) {  // all integer digits, no exponent
    precision = std::max(precision, static_cast<int>(std::log10(a)) + 1);
  }
  std::snprintf(buf, sizeof(buf), "%.*g", precision, v);
  return buf;
}

std::string Join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// "an integer >= 1", "a number in [0, 1]", "a number > 0".
std::string Expected(const char* what, double lo, double hi, bool lo_open) {
  std::string s = what;
  const bool has_lo = lo > -kInf && lo != INT_MIN, has_hi = hi < kInf && hi != INT_MAX;
  if (has_lo && has_hi) {
    return s + " in " + (lo_open ? "(" : "[") + FormatDouble(lo) + ", " + FormatDouble(hi) + "]";
  }
  if (has_lo) return s + (lo_open ? " > " : " >= ") + FormatDouble(lo);
  if (has_hi) return s + " <= " + FormatDouble(hi);
  return s;
}

double ParseDoubleValue(const std::string& raw, const std::string& where, double lo, double hi,
                        bool lo_open) {
  const std::string s = Trim(raw);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  const bool ok = !s.empty() && *end == '\0' && errno == 0 && std::isfinite(v) &&
                  (lo_open ? v > lo : v >= lo) && v <= hi;
  if (!ok) {
    throw InvalidArgument(where + ": expected " + Expected("a number", lo, hi, lo_open) +
                          ", got '" + raw + "'");
  }
  return v;
}

ConfigField Int(const std::string& key, int* p, int lo, int hi = INT_MAX) {
  return {key,
          [=](const std::string& raw, const std::string& where) {
            *p = ParseIntValue(raw, where, lo, hi);
          },
          [=] { return std::to_string(*p); }};
}

ConfigField Double(const std::string& key, double* p, double lo, double hi = kInf,
                   bool lo_open = false) {
  return {key,
          [=](const std::string& raw, const std::string& where) {
            *p = ParseDoubleValue(raw, where, lo, hi, lo_open);
          },
          [=] { return FormatDouble(*p); }};
}

ConfigField Bool(const std::string& key, bool* p) {
  return {
      key,
      [=](const std::string& raw, const std::string& where) { *p = ParseBoolValue(raw, where); },
      [=] { return std::string(*p ? "true" : "false"); }};
}

ConfigField OneOf(const std::string& key, std::string* p, std::vector<std::string> choices) {
  return {key,
          [=](const std::string& raw, const std::string& where) {
            const std::string s = Trim(raw);
            if (std::find(choices.begin(), choices.end(), s) == choices.end()) {
              throw InvalidArgument(where + ": '" + raw + "' is not one of " + Join(choices));
            }
            *p = s;
          },
          [=] { return *p; }};
}

ConfigField String(const std::string& key, std::string* p,
                   std::function<void(const std::string&, const std::string&)> check = nullptr) {
  return {key,
          [=](const std::string& raw, const std::string& where) {
            if (check) check(raw, where);
            *p = raw;
          },
          [=] { return *p; }};
}

ConfigField Codec(const std::string& key, CodecSpec* p) { return {key, nullptr, nullptr, p}; }

// A list of strings: "a,b", "[a, b]" or a YAML list; each item checked.
ConfigField StringList(const std::string& key, std::vector<std::string>* p,
                       std::function<void(const std::string&, const std::string&)> check) {
  ConfigField f{key,
                [=](const std::string& raw, const std::string& where) {
                  std::string s = Trim(raw);
                  if (s.size() >= 2 && s.front() == '[' && s.back() == ']')
                    s = s.substr(1, s.size() - 2);
                  std::vector<std::string> items;
                  size_t begin = 0;
                  while (!Trim(s).empty() && begin <= s.size()) {
                    const size_t comma = std::min(s.find(',', begin), s.size());
                    const std::string item = Trim(s.substr(begin, comma - begin));
                    if (item.empty())
                      throw InvalidArgument(where + ": an empty item in '" + raw + "'");
                    check(item, where);
                    items.push_back(item);
                    begin = comma + 1;
                  }
                  *p = items;
                },
                [=] { return Join(*p); }};
  f.list = true;
  return f;
}

// Optimal-string-alignment distance: edits, with a swap of neighbours counting as one.
size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
      }
    }
  }
  return d[a.size()][b.size()];
}

// "learning_rate" -> "lr"; words without '_' stay as they are.
std::string Initials(const std::string& s) {
  if (s.find('_') == std::string::npos) return s;
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '_' && (i == 0 || s[i - 1] == '_')) out += s[i];
  }
  return out;
}

// Edit distance that also matches an abbreviation by initials (learning_rate ~ lr) at cost 1.
size_t KeyDistance(const std::string& a, const std::string& b) {
  return std::min(
      {EditDistance(a, b), 1 + EditDistance(Initials(a), b), 1 + EditDistance(a, Initials(b))});
}

std::pair<std::string, std::string> SplitSection(const std::string& key) {
  const auto dot = key.rfind('.');
  if (dot == std::string::npos) return {"", key};
  return {key.substr(0, dot), key.substr(dot + 1)};
}

void CheckName(const std::string& raw, const std::string& where) {
  if (raw.empty() || raw.find('/') != std::string::npos) {
    throw InvalidArgument(where + ": expected a non-empty name without '/', got '" + raw + "'");
  }
}

void CheckIpv4(const std::string& raw, const std::string& where) {
  in_addr a{};
  if (inet_pton(AF_INET, Trim(raw).c_str(), &a) != 1)
    throw InvalidArgument(where + ": '" + raw +
                          "' is not an IPv4 address (e.g. 127.0.0.1, 0.0.0.0)");
}

void CheckNonEmpty(const std::string& raw, const std::string& where) {
  if (Trim(raw).empty()) throw InvalidArgument(where + ": expected a non-empty path");
}

}  // namespace

std::vector<ConfigField> ConfigFields(Config& c) {
  auto address = [](int min_port) {
    return [=](const std::string& raw, const std::string& where) {
      CheckHostPort(raw, where, min_port);
    };
  };
  return {
      String("name", &c.name, CheckName),
      OneOf("model", &c.model,
            {"lenet", "vgg11", "resnet18", "resnet20", "resnet8", "torchscript"}),
      String("model_path", &c.model_path),
      OneOf("dataset.name", &c.dataset.name, {"fashion-mnist", "mnist", "cifar10", "synthetic"}),
      String("dataset.path", &c.dataset.path),
      Int("dataset.subset", &c.dataset.subset, 0),
      Int("dataset.test_subset", &c.dataset.test_subset, 0),
      OneOf("device", &c.device, {"auto", "cpu", "cuda"}),
      Int("train.epochs", &c.train.epochs, 1),
      Int("train.batch_size", &c.train.batch_size, 1),
      Double("train.lr", &c.train.lr, 0),
      Double("train.momentum", &c.train.momentum, 0, 1),
      Double("train.weight_decay", &c.train.weight_decay, 0),
      Bool("train.nesterov", &c.train.nesterov),
      Int("train.seed", &c.train.seed, 0),
      OneOf("train.lr_schedule", &c.train.lr_schedule, {"none", "step", "cosine"}),
      Double("train.warmup_epochs", &c.train.warmup_epochs, 0),
      Int("train.lr_step_epochs", &c.train.lr_step_epochs, 0),
      Double("train.lr_gamma", &c.train.lr_gamma, 0, 1, /*lo_open=*/true),
      Int("train.threads", &c.train.threads, 1),
      Int("train.log_every", &c.train.log_every, 0),
      Int("train.checkpoint_every", &c.train.checkpoint_every, 0),
      Int("train.checkpoint_keep", &c.train.checkpoint_keep, 1),
      String("cluster.server", &c.cluster.server, address(1)),
      Int("cluster.workers", &c.cluster.workers, 1),
      StringList("cluster.servers", &c.cluster.servers, address(1)),
      Double("cluster.partition_mb", &c.cluster.partition_mb, 0),
      OneOf("sync.mode", &c.sync.mode, {"sync", "async"}),
      OneOf("sync.exchange", &c.sync.exchange, {"gradients", "weights", "gaussian"}),
      Int("sync.every", &c.sync.every, 1),
      Int("sync.max_staleness", &c.sync.max_staleness, 0),
      OneOf("sync.model_selection", &c.sync.model_selection, {"best", "average"}),
      Bool("sync.overlap", &c.sync.overlap),
      Bool("sync.cross_barrier", &c.sync.cross_barrier),
      Double("sync.bucket_mb", &c.sync.bucket_mb, 0, kInf, /*lo_open=*/true),
      Codec("push", &c.push),
      Codec("pull", &c.pull),
      Int("compress.min_numel", &c.compress.min_numel, 0),
      Bool("compress.skip_1d", &c.compress.skip_1d),
      Double("compress.momentum_correction", &c.compress.momentum_correction, 0, 0.999999),
      Double("compress.clip_norm", &c.compress.clip_norm, 0),
      Int("compress.warmup_epochs", &c.compress.warmup_epochs, 0),
      String("compress.dynamic.ladder", &c.compress.dynamic.ladder),
      Double("compress.dynamic.acc_threshold", &c.compress.dynamic.acc_threshold, 0),
      Double("compress.dynamic.loss_threshold", &c.compress.dynamic.loss_threshold, 0),
      Int("compress.dynamic.patience", &c.compress.dynamic.patience, 1),
      Int("compress.dynamic.uncompressed_epochs", &c.compress.dynamic.uncompressed_epochs, 0),
      Bool("compress.auto", &c.compress.auto_select),
      Double("compress.link_gbps", &c.compress.link_gbps, 0),
      Double("compress.link_latency_ms", &c.compress.link_latency_ms, 0),
      OneOf("compress.topology", &c.compress.topology, {"star", "links"}),
      String("server.listen", &c.server.listen, address(0)),
      Int("server.threads", &c.server.threads, 1),
      Double("server.worker_timeout_s", &c.server.worker_timeout_s, 0, kInf, /*lo_open=*/true),
      Int("server.stats_every", &c.server.stats_every, 0),
      Int("server.metrics_port", &c.server.metrics_port, 0, 65535),
      String("server.metrics_host", &c.server.metrics_host, CheckIpv4),
      Double("server.deadline_s", &c.server.deadline_s, 0, kInf, /*lo_open=*/true),
      Bool("server.shadow_weights", &c.server.shadow_weights),
      Int("server.max_model_mb", &c.server.max_model_mb, 1),
      Int("server.max_broadcast_mb", &c.server.max_broadcast_mb, 1, 4096),
      String("output.dir", &c.output.dir, CheckNonEmpty),
      Bool("security.tls", &c.security.tls),
      String("security.cert", &c.security.cert),
      String("security.key", &c.security.key),
      String("security.ca", &c.security.ca),
      String("security.client_ca", &c.security.client_ca),
      String("security.client_cert", &c.security.client_cert),
      String("security.client_key", &c.security.client_key),
      String("security.server_name", &c.security.server_name),
      String("security.token_file", &c.security.token_file),
      Bool("security.allow_plaintext_token", &c.security.allow_plaintext_token),
      Double("faults.drop", &c.faults.drop, 0, 1),
      Double("faults.drop_reply", &c.faults.drop_reply, 0, 1),
      Double("faults.delay", &c.faults.delay, 0, 1),
      Int("faults.delay_ms", &c.faults.delay_ms, 0, 600000),
      Double("faults.fail", &c.faults.fail, 0, 1),
      Int("faults.seed", &c.faults.seed, 0),
  };
}

ConfigField* FindField(std::vector<ConfigField>& fields, const std::string& key) {
  for (auto& f : fields) {
    if (f.key == key) return &f;
  }
  return nullptr;
}

bool IsSection(const std::vector<ConfigField>& fields, const std::string& key) {
  for (const auto& f : fields) {
    if (f.key.size() > key.size() && f.key.compare(0, key.size() + 1, key + ".") == 0) return true;
  }
  return false;
}

std::string UnknownKeyMessage(const std::vector<ConfigField>& fields, const std::string& key) {
  // Candidates: every key and section; one in another section costs one more edit.
  std::vector<std::string> candidates;
  for (const auto& f : fields) {
    candidates.push_back(f.key);
    const auto dot = f.key.find('.');
    if (dot != std::string::npos) candidates.push_back(f.key.substr(0, dot));
  }
  const auto [section, leaf] = SplitSection(key);
  std::string best;
  size_t best_distance = SIZE_MAX;
  std::vector<std::string> siblings;
  for (const auto& c : candidates) {
    const auto [c_section, c_leaf] = SplitSection(c);
    const size_t d = KeyDistance(leaf, c_leaf) + (c_section == section ? 0 : 1);
    if (d < best_distance) best_distance = d, best = c;
    if (c_section == section &&
        std::find(siblings.begin(), siblings.end(), c_leaf) == siblings.end()) {
      siblings.push_back(c_leaf);
    }
  }
  std::string msg = "unknown key '" + key + "'";
  if (best_distance <= 2 || 2 * best_distance <= std::max(leaf.size(), best.size())) {
    return msg + "; did you mean '" + best + "'?";
  }
  if (siblings.empty()) return msg;
  return msg + "; valid keys" + (section.empty() ? "" : " in '" + section + "'") + ": " +
         Join(siblings);
}

int ParseIntValue(const std::string& raw, const std::string& where, long long lo, long long hi) {
  const std::string s = Trim(raw);
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(s.c_str(), &end, 10);
  const bool ok = !s.empty() && *end == '\0' && errno == 0 && v >= lo && v <= hi;
  if (!ok) {
    throw InvalidArgument(
        where + ": expected " +
        Expected("an integer", static_cast<double>(lo), static_cast<double>(hi), false) +
        ", got '" + raw + "'");
  }
  return static_cast<int>(v);
}

bool ParseBoolValue(const std::string& raw, const std::string& where) {
  std::string s = Trim(raw);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  throw InvalidArgument(where + ": expected true or false, got '" + raw + "'");
}

void CheckHostPort(const std::string& raw, const std::string& where, int min_port) {
  const auto colon = raw.rfind(':');
  bool ok = colon != std::string::npos && colon > 0 && colon + 1 < raw.size() &&
            raw.find_first_of(" \t") == std::string::npos;
  if (ok) {
    const std::string port = raw.substr(colon + 1);
    char* end = nullptr;
    const long v = std::strtol(port.c_str(), &end, 10);
    ok = *end == '\0' && std::isdigit(static_cast<unsigned char>(port[0])) && v >= min_port &&
         v <= 65535;
  }
  if (!ok) {
    throw InvalidArgument(where + ": expected host:port with a port in [" +
                          std::to_string(min_port) + ", 65535], got '" + raw + "'");
  }
}

}  // namespace gradpress::detail
