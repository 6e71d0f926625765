#pragma once
// A flat JSON object writer for metrics.jsonl and summary.json lines: keys in insertion
// order, numbers and strings only; a non-finite number is written as null.
//
//   std::string s = JsonLine().Int("step", 3).Num("loss", 0.25).Str("name", "x").Done();
//
// Shared by worker/trainer.cc and sim/, so their lines read alike.
// Thread-safety: a value.
#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

namespace gradpress {

class JsonLine {
 public:
  JsonLine& Num(const std::string& k, double v) {
    Key(k);
    if (std::isfinite(v)) {
      std::ostringstream s;
      s.precision(10);
      s << v;
      out_ += s.str();
    } else {
      out_ += "null";
    }
    return *this;
  }
  JsonLine& Int(const std::string& k, int64_t v) {
    Key(k);
    out_ += std::to_string(v);
    return *this;
  }
  JsonLine& Bool(const std::string& k, bool v) {
    Key(k);
    out_ += v ? "true" : "false";
    return *this;
  }
  JsonLine& Str(const std::string& k, const std::string& v) {
    Key(k);
    out_ += '"';
    for (char c : v) {
      if (c == '"' || c == '\\') out_ += '\\';
      out_ += c;
    }
    out_ += '"';
    return *this;
  }
  std::string Done() const { return out_ + "}"; }

 private:
  void Key(const std::string& k) {
    out_ += out_.size() > 1 ? ", \"" : "\"";
    out_ += k + "\": ";
  }
  std::string out_ = "{";
};

}  // namespace gradpress
