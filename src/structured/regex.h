// Regular expressions: the ECMAScript subset JSON Schema `pattern`s and vLLM's guided_regex use,
// parsed into an Expr over code points (structured/automaton.h).
//
// Supported: literals (UTF-8), `.` (any character but \n \r \u2028 \u2029), classes `[a-z]`,
// `[^...]` with ranges and escapes, `\d \D \w \W \s \S` (ECMAScript meanings: ASCII digits and
// word characters, Unicode white space), escapes `\n \r \t \f \v \0 \xHH \uHHHH \u{H..}
// \cX` and any escaped punctuation, groups `(...)`, `(?:...)`, `(?<name>...)`,
// `(?P<name>...)`, alternation, quantifiers `* + ? {n} {n,} {n,m}` (lazy forms too: they
// match the same strings), and the anchors `^` at the start and `$` at the end of a top-level
// alternative.
//
// Refused with InvalidArgument naming the construct and its offset: backreferences,
// lookahead/lookbehind, word boundaries `\b \B`, Unicode property escapes `\p{..}`, inline
// flags `(?i)`, possessive quantifiers, anchors elsewhere, lone surrogates, unknown escapes.
#pragma once

#include <string_view>

#include "structured/automaton.h"

namespace sluice::structured {

enum class RegexMode {
  kFullMatch,  // the whole string matches (guided_regex; anchors are no-ops)
  kSearch,     // JSON Schema `pattern`: some substring matches, unless anchored
};

StatusOr<ExprP> ParseRegex(std::string_view pattern, RegexMode mode);

// Any Unicode scalar value.
ExprP AnyCodepoint();

}  // namespace sluice::structured
