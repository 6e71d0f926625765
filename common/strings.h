#pragma once
// Small string helpers shared by the config parser and the transport's env/file readers.
#include <string>

namespace gradpress {

// `s` without leading and trailing spaces, tabs and line ends.
inline std::string Trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

}  // namespace gradpress
