// Grammars in the GBNF format (llama.cpp's, as vLLM and llguidance accept it):
//
//   root   ::= select ws "FROM" ws table (ws where)?
//   select ::= "SELECT" ws column ("," ws? column)*
//   column ::= [a-z_] [a-z0-9_]*
//   ws     ::= [ \t\n]+           # comments run to the end of the line
//
// Rules `name ::= ...` (names of letters, digits, '-' and '_'), alternatives `|`, sequences,
// string literals "..." (escapes \" \\ \n \r \t \xHH \uHHHH \UHHHHHHHH), character classes
// [...] / [^...] with ranges and the same escapes, `.` (any character), groups ( ), and the
// quantifiers * + ? {n} {n,} {n,m}. The start rule is `root`.
//
// A grammar without recursion compiles to the same finite automaton as every other constraint;
// a rule that refers to itself, directly or through others, becomes a call of that rule, run by
// the pushdown automaton (pushdown.h; nesting up to kMaxRecursionDepth). Left recursion (a rule
// calling itself before reading anything) is refused when the constraint is built, as are
// undefined rules and syntax errors (with the line and column).
#pragma once

#include <string_view>

#include "structured/automaton.h"

namespace sluice::structured {

StatusOr<ExprP> CompileGrammar(std::string_view grammar);

}  // namespace sluice::structured
