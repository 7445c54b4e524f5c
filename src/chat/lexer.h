// Lexer of the Jinja2 subset (docs/chat_templates.md): a template's text, tags and
// expression tokens, with the whitespace rules of jinja2 under trim_blocks=True,
// lstrip_blocks=True, keep_trailing_newline=False. Internal to the template parser
// (parser.cc); chat/template.h is the interface.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chat/ast.h"

namespace sluice::chat::lex {

enum class T {
  kText,
  kVarBegin,
  kVarEnd,
  kBlockBegin,
  kBlockEnd,
  kName,
  kString,
  kInt,
  kFloat,
  kOp,
  kEof
};
struct Token {
  T t;
  std::string text;
  int line;
  Value val;
};

// "template syntax error at line <line>: <msg>" (InvalidArgument).
Status Err(int line, const std::string& msg);

// The tokens of a template, ending with one kEof.
StatusOr<std::vector<Token>> Lex(std::string_view source);

}  // namespace sluice::chat::lex
