#pragma once
// A flat JSON object writer for metrics.jsonl and summary.json lines: keys in insertion
// order, numbers, booleans and strings only; a non-finite number is written as null;
// strings and keys are escaped per RFC 8259, so any name makes valid JSON.
//
//   std::string s = JsonLine().Int("step", 3).Num("loss", 0.25).Str("name", "x").Done();
//
// Shared by worker/loop/trainer.cc and sim/, so their lines read alike.
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
    Quote(v);
    return *this;
  }
  // A value that is JSON already (an array or object written by the caller).
  JsonLine& Raw(const std::string& k, const std::string& json) {
    Key(k);
    out_ += json;
    return *this;
  }
  std::string Done() const { return out_ + "}"; }

 private:
  void Key(const std::string& k) {
    if (out_.size() > 1) out_ += ", ";
    Quote(k);
    out_ += ": ";
  }
  // A JSON string per RFC 8259: '"', '\\' and the control characters U+0000-U+001F escaped;
  // other bytes (UTF-8 included) as they are.
  void Quote(const std::string& v) {
    static const char kHex[] = "0123456789abcdef";
    out_ += '"';
    for (char ch : v) {
      const auto c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\b':
          out_ += "\\b";
          break;
        case '\f':
          out_ += "\\f";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (c < 0x20) {
            out_ += "\\u00";
            out_ += kHex[c >> 4];
            out_ += kHex[c & 15];
          } else {
            out_ += ch;
          }
      }
    }
    out_ += '"';
  }
  std::string out_ = "{";
};

}  // namespace gradpress
