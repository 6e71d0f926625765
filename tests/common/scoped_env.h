#pragma once
// ScopedEnv: sets (or with nullptr unsets) an environment variable for one scope, for the
// tests of what reads the environment (config identity, shards, servers).
#include <stdlib.h>

#include <string>

namespace gradpress::testing {

class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_.empty() ? unsetenv(name_.c_str()) : setenv(name_.c_str(), old_.c_str(), 1); }

 private:
  std::string name_, old_;
};

}  // namespace gradpress::testing
