// JSON Schema (Draft 2020-12 core, with the draft-04..2019 spellings real schemas use) compiled
// to an Expr over bytes: the language of the JSON texts the schema accepts, in the form sluice
// generates them (docs/structured-outputs.md):
//
// - objects: the declared properties in schema order (each optional one may be left out), then,
//   where the schema allows other keys, extra members; whitespace per JsonOptions::ws;
// - strings: characters raw (UTF-8) except `"` `\` and control characters, which are escaped
//   (\" \\ \b \f \n \r \t or \u00XX); `\/` is accepted too;
// - numbers: JSON numbers; integers without fraction or exponent; bounded numbers without
//   exponent.
//
// Recursion (a $ref cycle; free values, whose nested arrays and objects nest to any depth)
// becomes calls of rules (automaton.h kRef), run by the pushdown automaton (pushdown.h).
//
// Fail closed: a keyword, format or combination that cannot be enforced exactly is refused
// with InvalidArgument naming the JSON pointer and the feature. Annotations and unknown
// keywords (title, description, x-...) are ignored, as validators ignore them.
#pragma once

#include <string>
#include <string_view>

#include "structured/automaton.h"

namespace sluice::structured {

struct JsonOptions {
  ExprP ws;  // between tokens; null = compact (no whitespace)
};

StatusOr<ExprP> CompileJsonSchema(std::string_view schema_json, const JsonOptions& options);
// Any JSON object (response_format json_object).
ExprP JsonObjectExpr(const JsonOptions& options);
// The canonical compact serialisation of a JSON text (keys in document order, strings escaped
// as sluice generates them, integral numbers as integers, others in the shortest fixed
// notation that reads back the same double): the form the automaton accepts.
StatusOr<std::string> CanonicalJson(std::string_view json);
// Quoted JSON string literal of a UTF-8 string, escaped as above.
std::string JsonQuote(std::string_view s);

}  // namespace sluice::structured
