// Logging: spdlog to stderr. Log(...) formats with fmt. Level set once at start-up.
#pragma once

#include <spdlog/spdlog.h>

namespace sluice {

// Configures the default logger (stderr, "[time] [level] msg"). Safe to call twice.
void InitLogging(const std::string& level = "info");

}  // namespace sluice

#define SLUICE_LOG_INFO(...) ::spdlog::info(__VA_ARGS__)
#define SLUICE_LOG_WARN(...) ::spdlog::warn(__VA_ARGS__)
#define SLUICE_LOG_ERROR(...) ::spdlog::error(__VA_ARGS__)
#define SLUICE_LOG_DEBUG(...) ::spdlog::debug(__VA_ARGS__)
