#pragma once
// spdlog setup shared by every binary: one logger, to stderr and optionally to a file.
//
//   gradpress::SetupLogging("info", "runs/x/server.log", "server");
//   spdlog::info("listening on {}", addr);
//
// Thread-safety: call SetupLogging once, before threads start; spdlog's loggers are
// thread-safe afterwards.
#include <string>

namespace gradpress {

// level: trace | debug | info | warn | error | off (throws InvalidArgument otherwise).
// file: empty for stderr only. name: shown in each line, e.g. "server" or "worker-1".
void SetupLogging(const std::string& level, const std::string& file = "",
                  const std::string& name = "gradpress");

}  // namespace gradpress
