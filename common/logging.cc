#include "common/logging.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <vector>

#include "common/error.h"

namespace gradpress {

void SetupLogging(const std::string& level, const std::string& file, const std::string& name) {
  const auto lvl = spdlog::level::from_str(level);
  GP_ENFORCE(lvl != spdlog::level::off || level == "off", "unknown log level '", level,
             "'; expected trace, debug, info, warn, error or off");
  std::vector<spdlog::sink_ptr> sinks;
  sinks.push_back(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  if (!file.empty()) {
    try {
      sinks.push_back(std::make_shared<spdlog::sinks::basic_file_sink_mt>(file));
    } catch (const spdlog::spdlog_ex& e) {
      throw InvalidArgument("cannot open log file '" + file + "': " + e.what());
    }
  }
  auto logger = std::make_shared<spdlog::logger>(name, sinks.begin(), sinks.end());
  logger->set_level(lvl);
  logger->set_pattern("%Y-%m-%d %H:%M:%S.%e [%n] %^%l%$ %v");
  logger->flush_on(spdlog::level::warn);
  spdlog::set_default_logger(logger);
}

}  // namespace gradpress
