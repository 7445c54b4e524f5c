// API-key checks of the HTTP front ends (--api-key).
#pragma once

#include <string_view>

namespace sluice::server {

// True when `a` equals `b`, comparing in time that depends on b's length only (b is the
// secret: no early exit on the first differing byte, the same work whatever a holds).
bool ConstantTimeEquals(std::string_view a, std::string_view b);

// True when an Authorization header carries `key` with the Bearer scheme: the scheme name is
// case-insensitive (RFC 7235: "bearer", "BEARER" ...), followed by one or more spaces or tabs;
// surrounding whitespace is ignored; the key is compared in constant time.
bool BearerMatches(std::string_view authorization, std::string_view key);

}  // namespace sluice::server
