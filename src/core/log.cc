#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace sluice {

void InitLogging(const std::string& level) {
  auto logger = spdlog::get("sluice");
  if (!logger) {
    logger = spdlog::stderr_color_mt("sluice");
    logger->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
  }
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace sluice
