// JSON Schema `format`s sluice enforces, as regular expressions over code points (full match):
// date-time, date, time (RFC 3339), email (a dot-atom local part @ a domain or IP literal),
// uuid, ipv4, ipv6 (RFC 4291 text forms), uri (RFC 3986 absolute URI characters). Any other
// format is InvalidArgument naming it: never ignored.
#pragma once

#include <string_view>

#include "structured/automaton.h"

namespace sluice::structured {

StatusOr<ExprP> FormatRegex(std::string_view format);

}  // namespace sluice::structured
