#include "server/auth.h"

#include <cctype>

namespace sluice::server {

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  unsigned diff = a.size() != b.size() ? 1u : 0u;
  for (size_t i = 0; i < b.size(); ++i) {
    const unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    diff |= x ^ static_cast<unsigned char>(b[i]);
  }
  // Keep the compiler from turning the loop back into an early-exit comparison.
  volatile unsigned sink = diff;
  return sink == 0;
}

bool BearerMatches(std::string_view h, std::string_view key) {
  auto space = [](char c) { return c == ' ' || c == '\t'; };
  while (!h.empty() && space(h.front())) h.remove_prefix(1);
  while (!h.empty() && space(h.back())) h.remove_suffix(1);
  constexpr std::string_view kScheme = "bearer";
  if (h.size() <= kScheme.size() || !space(h[kScheme.size()])) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(h[i])) != kScheme[i]) return false;
  }
  h.remove_prefix(kScheme.size());
  while (!h.empty() && space(h.front())) h.remove_prefix(1);
  return ConstantTimeEquals(h, key);
}

}  // namespace sluice::server
