// The chat-template AST (parser.cc builds it, render.cc walks it). Internal.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/value.h"

namespace sluice::chat {

struct Expr;
using ExprP = std::shared_ptr<const Expr>;

struct Expr {
  enum class K {
    kConst,
    kName,
    kAttr,
    kItem,
    kSlice,
    kCall,
    kFilter,
    kTest,
    kNeg,
    kPos,
    kNot,
    kBinary,
    kAnd,
    kOr,
    kCond,
    kList,
    kTuple,
    kDict,
    kConcat,
    kCompare
  };
  K k = K::kConst;
  int line = 0;
  Value val;             // kConst
  std::string name;      // kName, kAttr, kFilter, kTest, kBinary (operator)
  bool negated = false;  // kTest: `is not`
  ExprP a, b, c;         // operands (kSlice: a[b:c:args[0]])
  std::vector<ExprP>
      args;  // call/filter/test args, list/tuple items, dict keys+values, compare rhs
  std::vector<std::pair<std::string, ExprP>> kwargs;
  std::vector<std::string> ops;  // kCompare operators
};

struct Stmt;
using Body = std::vector<std::shared_ptr<const Stmt>>;

struct Stmt {
  enum class K {
    kText,
    kOutput,
    kIf,
    kFor,
    kSet,
    kSetBlock,
    kMacro,
    kCallBlock,
    kFilterBlock,
    kBreak,
    kContinue,
    kWith,
    kScope
  };
  K k = K::kText;
  int line = 0;
  std::string text;  // kText; kMacro name; kSet/kSetBlock target name
  std::string attr;  // kSet to ns.attr
  ExprP expr;        // output, set value, for iterable, call block call, filter chain
  ExprP cond;        // for's `if`
  std::vector<std::string>
      names;                    // for/set targets (several = tuple unpacking); macro/caller params
  std::vector<ExprP> defaults;  // macro/caller param defaults (nullptr = none)
  std::vector<ExprP> conds;     // if/elif conditions
  std::vector<Body> bodies;     // if: one per cond (+ else); for: body, else; others: body
  std::vector<std::pair<std::string, ExprP>> assigns;  // with
};

// Parses a template (already normalised). Error messages name the line.
StatusOr<Body> ParseTemplate(std::string_view source);

}  // namespace sluice::chat
