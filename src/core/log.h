// Logging: spdlog to stderr. Log(...) formats with fmt. Level set once at start-up.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <mutex>

namespace sluice {

// Configures the default logger (stderr, "[time] [level] msg"). Safe to call twice.
void InitLogging(const std::string& level = "info");

// Rate limit for a line that can repeat without bound (an accept loop failing over and
// over): at most one line per interval. Allow() says whether to write now and, when it does,
// how many lines were dropped since the last one written. Thread-safe.
class LogLimiter {
 public:
  explicit LogLimiter(double interval_s) : interval_s_(interval_s) {}
  bool Allow(int64_t* suppressed);  // on the steady clock
  bool AllowAt(double now_s, int64_t* suppressed);

 private:
  std::mutex mu_;
  const double interval_s_;
  bool any_ = false;
  double last_ = 0;
  int64_t dropped_ = 0;
};

}  // namespace sluice

#define SLUICE_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define SLUICE_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define SLUICE_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
#define SLUICE_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
