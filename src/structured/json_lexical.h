// Internal to the JSON Schema compiler (json_schema.cc): the canonical compact spelling of
// JSON values and the expressions of JSON strings and numbers.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "structured/automaton.h"

namespace sluice::structured::json_text {

using simdjson::dom::element;

struct Bound {
  bool set = false;
  double v = 0;
  bool excl = false;
};

void AppendQuoted(std::string_view s, std::string* out);
void AppendDouble(double d, std::string* out);
void AppendCanonical(const element& e, std::string* out);
std::string Canonical(const element& e);
ExprP JsonEncode(const ExprP& e);
ExprP StringChar();
ExprP Quote();
ExprP AnyString();
ExprP Digit();
ExprP Digit19();
ExprP Natural();
ExprP AnyInteger();
ExprP Fraction();
ExprP Exponent();
ExprP AnyNumber();
ExprP DigitsRange(const std::string& lo, const std::string& hi);
ExprP NaturalRange(int64_t lo, int64_t hi);
ExprP IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi);
ExprP NonNegNumber(std::optional<int64_t> lo, bool lo_excl, std::optional<int64_t> hi,
                   bool hi_excl);
ExprP BoundedNumber(const Bound& lo, const Bound& hi);
ExprP StringExcluding(const std::vector<std::string>& names);

}  // namespace sluice::structured::json_text
