#include "transport/fault_injection.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "common/error.h"
#include "common/strings.h"

namespace gradpress::transport {
namespace {

double Fraction(const std::string& value, const std::string& where, const std::string& item,
                const std::string& key) {
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  GP_ENFORCE(!value.empty() && *end == '\0' && errno == 0 && std::isfinite(v) && v >= 0 && v <= 1,
             where, ": item '", item, "': ", key, " must be a number in [0, 1]");
  return v;
}

long long Integer(const std::string& value, const std::string& where, const std::string& item,
                  const std::string& key, long long hi) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  GP_ENFORCE(!value.empty() && *end == '\0' && errno == 0 && v >= 0 && v <= hi, where, ": item '",
             item, "': ", key, " must be an integer in [0, ", hi, "]");
  return v;
}

}  // namespace

std::string FaultOptions::ToString() const {
  std::ostringstream os;
  os << "drop=" << drop << ",drop_reply=" << drop_reply << ",delay=" << delay
     << ",delay_ms=" << delay_ms << ",fail=" << fail << ",seed=" << seed;
  return os.str();
}

FaultOptions FaultOptionsFromConfig(const FaultsConfig& c) {
  FaultOptions o;
  o.drop = c.drop;
  o.drop_reply = c.drop_reply;
  o.delay = c.delay;
  o.delay_ms = c.delay_ms;
  o.fail = c.fail;
  o.seed = static_cast<uint64_t>(c.seed);
  return o;
}

FaultOptions ParseFaultSpec(const std::string& text, const std::string& where, FaultOptions o) {
  std::stringstream in(text);
  std::string raw;
  while (std::getline(in, raw, ',')) {
    const std::string item = Trim(raw);
    if (item.empty()) continue;
    const auto eq = item.find('=');
    GP_ENFORCE(eq != std::string::npos, where, ": item '", item,
               "' is not key=value (e.g. drop=0.1)");
    const std::string key = Trim(item.substr(0, eq)), value = Trim(item.substr(eq + 1));
    if (key == "drop") {
      o.drop = Fraction(value, where, item, key);
    } else if (key == "drop_reply") {
      o.drop_reply = Fraction(value, where, item, key);
    } else if (key == "delay") {
      o.delay = Fraction(value, where, item, key);
    } else if (key == "fail") {
      o.fail = Fraction(value, where, item, key);
    } else if (key == "delay_ms") {
      o.delay_ms = static_cast<int>(Integer(value, where, item, key, 600000));
    } else if (key == "seed") {
      o.seed = static_cast<uint64_t>(Integer(value, where, item, key, INT64_MAX));
    } else {
      throw InvalidArgument(where + ": item '" + item + "': unknown key '" + key +
                            "' (keys: drop, drop_reply, delay, delay_ms, fail, seed)");
    }
  }
  return o;
}

FaultOptions ResolveFaults(const FaultsConfig& c) {
  FaultOptions o = FaultOptionsFromConfig(c);
  const char* env = std::getenv(kFaultsEnv);
  if (env != nullptr && *env != '\0') o = ParseFaultSpec(env, std::string("$") + kFaultsEnv, o);
  return o;
}

uint64_t StreamOf(const std::string& name) {
  uint64_t h = 14695981039346656037ull;
  for (const unsigned char ch : name) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

FaultInjector::FaultInjector(FaultOptions options, uint64_t stream)
    : options_(options), rng_(options.seed * 0x9E3779B97F4A7C15ull ^ stream) {}

double FaultInjector::Uniform() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }

FaultInjector::Attempt FaultInjector::NextAttempt() {
  Attempt a;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const double d = Uniform(), r = Uniform(), l = Uniform();
    a.drop = d < options_.drop;
    a.drop_reply = !a.drop && r < options_.drop_reply;
    if (l < options_.delay) a.delay_ms = options_.delay_ms;
  }
  const uint64_t n = (a.drop ? 1 : 0) + (a.drop_reply ? 1 : 0) + (a.delay_ms > 0 ? 1 : 0);
  if (n) injected_.fetch_add(n, std::memory_order_relaxed);
  return a;
}

bool FaultInjector::NextFail() {
  bool fail;
  {
    std::lock_guard<std::mutex> lock(mu_);
    fail = Uniform() < options_.fail;
  }
  if (fail) injected_.fetch_add(1, std::memory_order_relaxed);
  return fail;
}

}  // namespace gradpress::transport
