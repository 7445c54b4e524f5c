#include "structured/formats.h"

#include <string>

#include "structured/regex.h"

namespace sluice::structured {

namespace {

// Years 0001-9999 (as Python's date), days per month, February 29 in leap years only.
const std::string kYear = R"(([1-9]\d{3}|0[1-9]\d{2}|00[1-9]\d|000[1-9]))";
const std::string kLeap =
    R"((\d\d(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00))";
const std::string kDate =
    "(" + kYear +
    R"(-((0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|(0[469]|11)-(0[1-9]|[12]\d|30)|02-(0[1-9]|1\d|2[0-8]))|)" +
    kLeap + "-02-29)";
const std::string kTime =
    R"(([01]\d|2[0-3]):[0-5]\d:([0-5]\d|60)(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d))";
const std::string kH16 = R"([0-9A-Fa-f]{1,4})";
const std::string kV4 =
    R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(\.(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)){3})";

std::string Ipv6() {
  const std::string h = kH16, ls32 = "(" + h + ":" + h + "|" + kV4 + ")";
  auto rep = [&](int n) {
    return n == 0 ? std::string() : "(" + h + ":){" + std::to_string(n) + "}";
  };
  auto upto = [&](int n) {  // (h16 ":"){0,n-1} h16, or nothing
    if (n < 0) return std::string();
    return "((" + h + ":){0," + std::to_string(n) + "}" + h + ")?";
  };
  std::string r = "(" + rep(6) + ls32;
  r += "|::" + rep(5) + ls32;
  r += "|" + upto(0) + "::" + rep(4) + ls32;
  r += "|" + upto(1) + "::" + rep(3) + ls32;
  r += "|" + upto(2) + "::" + rep(2) + ls32;
  r += "|" + upto(3) + "::" + h + ":" + ls32;
  r += "|" + upto(4) + "::" + ls32;
  r += "|" + upto(5) + "::" + h;
  r += "|" + upto(6) + "::)";
  return r;
}

}  // namespace

StatusOr<ExprP> FormatRegex(std::string_view format) {
  std::string re;
  if (format == "date") {
    re = kDate;
  } else if (format == "time") {
    re = kTime;
  } else if (format == "date-time") {
    re = kDate + "[Tt]" + kTime;
  } else if (format == "uuid") {
    re = R"([0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12})";
  } else if (format == "ipv4") {
    re = kV4;
  } else if (format == "ipv6") {
    re = Ipv6();
  } else if (format == "email") {
    const std::string atom = R"([A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)";
    re = atom + R"((\.)" + atom + R"()*@([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*)" +
         R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
  } else if (format == "uri") {
    re = R"([A-Za-z][A-Za-z0-9+.-]*:([A-Za-z0-9._~!$&'()*+,;=:@/?#\[\]-]|%[0-9A-Fa-f]{2})*)";
  } else {
    return InvalidArgument("format \"" + std::string(format) +
                           "\" is not supported (supported: date-time, date, time, email, uuid, "
                           "ipv4, ipv6, uri)");
  }
  return ParseRegex(re, RegexMode::kFullMatch);
}

}  // namespace sluice::structured
