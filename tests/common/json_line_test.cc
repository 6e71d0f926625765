// JsonLine writes valid JSON (RFC 8259) whatever the names hold.
#include "common/json_line.h"

#include <catch2/catch.hpp>
#include <limits>
#include <string>

namespace gradpress {
namespace {

// Decodes the JSON string starting at s[*i] (its opening quote); leaves *i after the closing
// quote. Only the escapes JsonLine writes are accepted.
std::string Unquote(const std::string& s, size_t* i) {
  REQUIRE(s[*i] == '"');
  std::string out;
  for (++*i; s[*i] != '"'; ++*i) {
    const auto c = static_cast<unsigned char>(s[*i]);
    REQUIRE(c >= 0x20);  // RFC 8259: control characters must be escaped
    if (c != '\\') {
      out += s[*i];
      continue;
    }
    const char e = s[++*i];
    switch (e) {
      case '"':
        out += '"';
        break;
      case '\\':
        out += '\\';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'n':
        out += '\n';
        break;
      case 'r':
        out += '\r';
        break;
      case 't':
        out += '\t';
        break;
      case 'u':
        REQUIRE(s.substr(*i + 1, 2) == "00");
        out += static_cast<char>(std::stoi(s.substr(*i + 3, 2), nullptr, 16));
        *i += 4;
        break;
      default:
        FAIL("unexpected escape \\" << e);
    }
  }
  ++*i;
  return out;
}

TEST_CASE("JsonLine escapes quotes, backslashes and every control character", "[json]") {
  CHECK(JsonLine().Str("name", "a\"b\\c\nd\te\x01").Done() == R"({"name": "a\"b\\c\nd\te\u0001"})");
  std::string all;
  for (int c = 1; c < 128; ++c) all += static_cast<char>(c);
  all += "\xc3\xa9";  // UTF-8 passes through
  const std::string line = JsonLine().Str("k\n", all).Int("n", 3).Done();
  size_t i = 1;
  CHECK(Unquote(line, &i) == "k\n");
  REQUIRE(line.substr(i, 2) == ": ");
  i += 2;
  CHECK(Unquote(line, &i) == all);
  CHECK(line.substr(i) == ", \"n\": 3}");
}

TEST_CASE("JsonLine writes non-finite numbers as null and booleans bare", "[json]") {
  CHECK(JsonLine().Num("x", std::numeric_limits<double>::infinity()).Bool("b", true).Done() ==
        R"({"x": null, "b": true})");
}

}  // namespace
}  // namespace gradpress
