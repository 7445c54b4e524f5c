#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

#include <chrono>

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

bool LogLimiter::Allow(int64_t* suppressed) {
  using namespace std::chrono;
  return AllowAt(duration<double>(steady_clock::now().time_since_epoch()).count(), suppressed);
}

bool LogLimiter::AllowAt(double now_s, int64_t* suppressed) {
  std::lock_guard<std::mutex> lock(mu_);
  if (any_ && now_s - last_ < interval_s_) {
    ++dropped_;
    return false;
  }
  any_ = true;
  last_ = now_s;
  *suppressed = dropped_;
  dropped_ = 0;
  return true;
}

}  // namespace sluice
