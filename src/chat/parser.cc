// Parser of the Jinja2 subset (docs/chat_templates.md) over lexer.h's tokens.
#include <cstring>
#include <string>

#include "chat/ast.h"
#include "chat/lexer.h"

namespace sluice::chat {
namespace {

using namespace lex;  // lexer.h

constexpr int kMaxNesting = 200;  // expression and statement nesting

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : toks_(std::move(toks)) {}

  StatusOr<Body> Run() {
    Body body;
    std::string stop;
    RETURN_IF_ERROR(ParseBody({}, &body, &stop));
    return body;
  }

 private:
  const Token& Cur() const { return toks_[i_]; }
  const Token& Peek(size_t k = 1) const { return toks_[std::min(i_ + k, toks_.size() - 1)]; }
  bool IsOp(const char* op) const { return Cur().t == T::kOp && Cur().text == op; }
  bool IsName(const char* n) const { return Cur().t == T::kName && Cur().text == n; }
  Status Expect(const char* op) {
    if (!IsOp(op)) return Err(Cur().line, std::string("expected '") + op + "'");
    ++i_;
    return Status::Ok();
  }
  Status ExpectName(const char* n) {
    if (!IsName(n)) return Err(Cur().line, std::string("expected '") + n + "'");
    ++i_;
    return Status::Ok();
  }
  Status ExpectBlockEnd() {
    if (Cur().t != T::kBlockEnd) return Err(Cur().line, "expected end of statement block");
    ++i_;
    return Status::Ok();
  }
  StatusOr<std::string> Name() {
    if (Cur().t != T::kName) return Err(Cur().line, "expected a name");
    return toks_[i_++].text;
  }

  // Parses statements until a block whose keyword is in `stops`; leaves the keyword in *stop
  // and the cursor after it (before the rest of that tag).
  Status ParseBody(const std::vector<std::string>& stops, Body* body, std::string* stop) {
    if (++depth_ > kMaxNesting) return Err(Cur().line, "nesting too deep");
    while (true) {
      const Token& t = Cur();
      if (t.t == T::kEof) {
        --depth_;
        if (stops.empty()) return Status::Ok();
        return Err(t.line, "unexpected end of template, expected '" + stops[0] + "'");
      }
      if (t.t == T::kText) {
        auto s = std::make_shared<Stmt>();
        s->k = Stmt::K::kText;
        s->line = t.line;
        s->text = t.text;
        body->push_back(s);
        ++i_;
      } else if (t.t == T::kVarBegin) {
        ++i_;
        auto s = std::make_shared<Stmt>();
        s->k = Stmt::K::kOutput;
        s->line = t.line;
        ASSIGN_OR_RETURN(s->expr, ParseTupleExpr());
        if (Cur().t != T::kVarEnd) return Err(Cur().line, "expected end of print statement");
        ++i_;
        body->push_back(s);
      } else if (t.t == T::kBlockBegin) {
        ++i_;
        if (Cur().t != T::kName) return Err(Cur().line, "expected a statement name");
        const std::string kw = Cur().text;
        for (const auto& st : stops) {
          if (kw == st) {
            ++i_;
            *stop = kw;
            --depth_;
            return Status::Ok();
          }
        }
        ASSIGN_OR_RETURN(auto s, ParseStatement());
        if (s) body->push_back(s);
      } else {
        return Err(t.line, "unexpected token");
      }
    }
  }

  StatusOr<std::shared_ptr<const Stmt>> ParseStatement() {
    const int line = Cur().line;
    const std::string kw = Cur().text;
    ++i_;
    auto s = std::make_shared<Stmt>();
    s->line = line;
    std::string stop;
    if (kw == "if") {
      s->k = Stmt::K::kIf;
      while (true) {
        ASSIGN_OR_RETURN(auto c, ParseTupleExpr());
        s->conds.push_back(c);
        RETURN_IF_ERROR(ExpectBlockEnd());
        s->bodies.emplace_back();
        RETURN_IF_ERROR(ParseBody({"elif", "else", "endif"}, &s->bodies.back(), &stop));
        if (stop == "elif") continue;
        if (stop == "else") {
          RETURN_IF_ERROR(ExpectBlockEnd());
          s->bodies.emplace_back();
          RETURN_IF_ERROR(ParseBody({"endif"}, &s->bodies.back(), &stop));
        }
        break;
      }
    } else if (kw == "for") {
      s->k = Stmt::K::kFor;
      RETURN_IF_ERROR(ParseTargets(&s->names));
      RETURN_IF_ERROR(ExpectName("in"));
      ASSIGN_OR_RETURN(s->expr, ParseTupleExpr(/*no_cond=*/true));
      if (IsName("if")) {
        ++i_;
        ASSIGN_OR_RETURN(s->cond, ParseExpr());
      }
      if (IsName("recursive")) return Err(Cur().line, "recursive loops are not supported");
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.resize(2);
      RETURN_IF_ERROR(ParseBody({"endfor", "else"}, &s->bodies[0], &stop));
      if (stop == "else") {
        RETURN_IF_ERROR(ExpectBlockEnd());
        RETURN_IF_ERROR(ParseBody({"endfor"}, &s->bodies[1], &stop));
      }
    } else if (kw == "set") {
      ASSIGN_OR_RETURN(std::string name, Name());
      if (IsOp(".")) {
        ++i_;
        ASSIGN_OR_RETURN(s->attr, Name());
      }
      s->text = name;
      s->names.push_back(name);
      while (s->attr.empty() && IsOp(",")) {
        ++i_;
        ASSIGN_OR_RETURN(std::string more, Name());
        s->names.push_back(more);
      }
      if (IsOp("=")) {
        ++i_;
        s->k = Stmt::K::kSet;
        ASSIGN_OR_RETURN(s->expr, ParseTupleExpr());
        RETURN_IF_ERROR(ExpectBlockEnd());
        return std::shared_ptr<const Stmt>(s);
      }
      if (s->names.size() != 1) return Err(line, "expected '='");
      s->k = Stmt::K::kSetBlock;
      if (IsOp("|")) {
        ASSIGN_OR_RETURN(s->expr, ParseFilterChain(nullptr));
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody({"endset"}, &s->bodies[0], &stop));
    } else if (kw == "macro") {
      s->k = Stmt::K::kMacro;
      ASSIGN_OR_RETURN(s->text, Name());
      RETURN_IF_ERROR(ParseParams(s.get()));
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody({"endmacro"}, &s->bodies[0], &stop));
    } else if (kw == "call") {
      s->k = Stmt::K::kCallBlock;
      if (IsOp("(")) RETURN_IF_ERROR(ParseParams(s.get()));
      ASSIGN_OR_RETURN(s->expr, ParseExpr());
      if (s->expr->k != Expr::K::kCall) return Err(line, "expected a call");
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody({"endcall"}, &s->bodies[0], &stop));
    } else if (kw == "filter") {
      s->k = Stmt::K::kFilterBlock;
      ASSIGN_OR_RETURN(s->expr, ParseFilterChain(nullptr, /*first_without_pipe=*/true));
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody({"endfilter"}, &s->bodies[0], &stop));
    } else if (kw == "break" || kw == "continue") {
      s->k = kw == "break" ? Stmt::K::kBreak : Stmt::K::kContinue;
    } else if (kw == "with") {
      s->k = Stmt::K::kWith;
      while (Cur().t != T::kBlockEnd) {
        if (!s->assigns.empty()) RETURN_IF_ERROR(Expect(","));
        ASSIGN_OR_RETURN(std::string n, Name());
        RETURN_IF_ERROR(Expect("="));
        ASSIGN_OR_RETURN(auto e, ParseExpr());
        s->assigns.emplace_back(n, e);
      }
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody({"endwith"}, &s->bodies[0], &stop));
    } else if (kw == "generation") {  // transformers' AssistantTracker: renders its body
      s->k = Stmt::K::kScope;
      RETURN_IF_ERROR(ExpectBlockEnd());
      s->bodies.emplace_back();
      RETURN_IF_ERROR(ParseBody({"endgeneration"}, &s->bodies[0], &stop));
    } else {
      return Err(line, "unknown statement '" + kw + "'");
    }
    RETURN_IF_ERROR(ExpectBlockEnd());
    return std::shared_ptr<const Stmt>(s);
  }

  Status ParseTargets(std::vector<std::string>* names) {
    const bool paren = IsOp("(");
    if (paren) ++i_;
    while (true) {
      ASSIGN_OR_RETURN(std::string n, Name());
      names->push_back(n);
      if (!IsOp(",")) break;
      ++i_;
    }
    if (paren) RETURN_IF_ERROR(Expect(")"));
    return Status::Ok();
  }

  Status ParseParams(Stmt* s) {
    RETURN_IF_ERROR(Expect("("));
    while (!IsOp(")")) {
      if (!s->names.empty()) RETURN_IF_ERROR(Expect(","));
      if (IsOp(")")) break;
      ASSIGN_OR_RETURN(std::string n, Name());
      s->names.push_back(n);
      ExprP def;
      if (IsOp("=")) {
        ++i_;
        ASSIGN_OR_RETURN(def, ParseExpr());
      }
      s->defaults.push_back(def);
    }
    return Expect(")");
  }

  std::shared_ptr<Expr> New(Expr::K k, int line) {
    auto e = std::make_shared<Expr>();
    e->k = k;
    e->line = line;
    return e;
  }

  // expr (, expr)* -> tuple when a comma appears.
  StatusOr<ExprP> ParseTupleExpr(bool no_cond = false) {
    const int line = Cur().line;
    ASSIGN_OR_RETURN(ExprP first, no_cond ? ParseOr() : ParseExpr());
    if (!IsOp(",")) return first;
    auto t = New(Expr::K::kTuple, line);
    t->args.push_back(first);
    while (IsOp(",")) {
      ++i_;
      if (Cur().t == T::kVarEnd || Cur().t == T::kBlockEnd || IsName("if")) break;
      ASSIGN_OR_RETURN(ExprP e, no_cond ? ParseOr() : ParseExpr());
      t->args.push_back(e);
    }
    return ExprP(t);
  }

  StatusOr<ExprP> ParseExpr() {
    if (++depth_ > kMaxNesting) return Err(Cur().line, "expression nesting too deep");
    const int line = Cur().line;
    ASSIGN_OR_RETURN(ExprP e, ParseOr());
    while (IsName("if")) {
      ++i_;
      auto c = New(Expr::K::kCond, line);
      c->a = e;
      ASSIGN_OR_RETURN(c->b, ParseOr());
      if (IsName("else")) {
        ++i_;
        ASSIGN_OR_RETURN(c->c, ParseExpr());
      }
      e = c;
    }
    --depth_;
    return e;
  }

  StatusOr<ExprP> ParseOr() {
    ASSIGN_OR_RETURN(ExprP e, ParseAnd());
    while (IsName("or")) {
      auto n = New(Expr::K::kOr, Cur().line);
      ++i_;
      n->a = e;
      ASSIGN_OR_RETURN(n->b, ParseAnd());
      e = n;
    }
    return e;
  }
  StatusOr<ExprP> ParseAnd() {
    ASSIGN_OR_RETURN(ExprP e, ParseNot());
    while (IsName("and")) {
      auto n = New(Expr::K::kAnd, Cur().line);
      ++i_;
      n->a = e;
      ASSIGN_OR_RETURN(n->b, ParseNot());
      e = n;
    }
    return e;
  }
  StatusOr<ExprP> ParseNot() {
    if (IsName("not")) {
      if (++depth_ > kMaxNesting) return Err(Cur().line, "expression nesting too deep");
      auto n = New(Expr::K::kNot, Cur().line);
      ++i_;
      ASSIGN_OR_RETURN(n->a, ParseNot());
      --depth_;
      return ExprP(n);
    }
    return ParseCompare();
  }
  StatusOr<ExprP> ParseCompare() {
    const int line = Cur().line;
    ASSIGN_OR_RETURN(ExprP e, ParseMath1());
    std::shared_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (Cur().t == T::kOp && (Cur().text == "==" || Cur().text == "!=" || Cur().text == "<" ||
                                Cur().text == "<=" || Cur().text == ">" || Cur().text == ">=")) {
        op = Cur().text;
        ++i_;
      } else if (IsName("in")) {
        op = "in";
        ++i_;
      } else if (IsName("not") && Peek().t == T::kName && Peek().text == "in") {
        op = "notin";
        i_ += 2;
      } else {
        break;
      }
      if (!cmp) {
        cmp = New(Expr::K::kCompare, line);
        cmp->a = e;
      }
      cmp->ops.push_back(op);
      ASSIGN_OR_RETURN(ExprP r, ParseMath1());
      cmp->args.push_back(r);
    }
    if (cmp) return ExprP(cmp);
    return e;
  }
  StatusOr<ExprP> Binary(ExprP l, const std::string& op, ExprP r, int line) {
    auto n = New(op == "~" ? Expr::K::kConcat : Expr::K::kBinary, line);
    n->name = op;
    n->a = std::move(l);
    n->b = std::move(r);
    return ExprP(n);
  }
  StatusOr<ExprP> ParseMath1() {
    ASSIGN_OR_RETURN(ExprP e, ParseConcat());
    while (IsOp("+") || IsOp("-")) {
      const std::string op = Cur().text;
      const int line = Cur().line;
      ++i_;
      ASSIGN_OR_RETURN(ExprP r, ParseConcat());
      ASSIGN_OR_RETURN(e, Binary(e, op, r, line));
    }
    return e;
  }
  StatusOr<ExprP> ParseConcat() {
    ASSIGN_OR_RETURN(ExprP e, ParseMath2());
    while (IsOp("~")) {
      const int line = Cur().line;
      ++i_;
      ASSIGN_OR_RETURN(ExprP r, ParseMath2());
      ASSIGN_OR_RETURN(e, Binary(e, "~", r, line));
    }
    return e;
  }
  StatusOr<ExprP> ParseMath2() {
    ASSIGN_OR_RETURN(ExprP e, ParsePow());
    while (IsOp("*") || IsOp("/") || IsOp("//") || IsOp("%")) {
      const std::string op = Cur().text;
      const int line = Cur().line;
      ++i_;
      ASSIGN_OR_RETURN(ExprP r, ParsePow());
      ASSIGN_OR_RETURN(e, Binary(e, op, r, line));
    }
    return e;
  }
  StatusOr<ExprP> ParsePow() {
    ASSIGN_OR_RETURN(ExprP e, ParseUnary(true));
    while (IsOp("**")) {
      const int line = Cur().line;
      ++i_;
      ASSIGN_OR_RETURN(ExprP r, ParseUnary(true));
      ASSIGN_OR_RETURN(e, Binary(e, "**", r, line));
    }
    return e;
  }
  StatusOr<ExprP> ParseUnary(bool with_filter) {
    if (++depth_ > kMaxNesting) return Err(Cur().line, "expression nesting too deep");
    ExprP e;
    if (IsOp("-") || IsOp("+")) {
      auto n = New(IsOp("-") ? Expr::K::kNeg : Expr::K::kPos, Cur().line);
      ++i_;
      ASSIGN_OR_RETURN(n->a, ParseUnary(false));
      e = n;
    } else {
      ASSIGN_OR_RETURN(e, ParsePrimary());
    }
    ASSIGN_OR_RETURN(e, ParsePostfix(e));
    if (with_filter) {
      ASSIGN_OR_RETURN(e, ParseFilterExpr(e));
    }
    --depth_;
    return e;
  }

  StatusOr<ExprP> ParsePrimary() {
    const Token& t = Cur();
    const int line = t.line;
    if (t.t == T::kName) {
      ++i_;
      auto n = New(Expr::K::kConst, line);
      if (t.text == "true" || t.text == "True") {
        n->val = Value::Bool(true);
      } else if (t.text == "false" || t.text == "False") {
        n->val = Value::Bool(false);
      } else if (t.text == "none" || t.text == "None") {
        n->val = Value::None();
      } else {
        n->k = Expr::K::kName;
        n->name = t.text;
      }
      return ExprP(n);
    }
    if (t.t == T::kString) {
      std::string s;
      while (Cur().t == T::kString) s += toks_[i_++].val.s;
      auto n = New(Expr::K::kConst, line);
      n->val = Value::Str(std::move(s));
      return ExprP(n);
    }
    if (t.t == T::kInt || t.t == T::kFloat) {
      auto n = New(Expr::K::kConst, line);
      n->val = t.val;
      ++i_;
      return ExprP(n);
    }
    if (IsOp("(")) {
      ++i_;
      if (IsOp(")")) {
        ++i_;
        return ExprP(New(Expr::K::kTuple, line));
      }
      ASSIGN_OR_RETURN(ExprP e, ParseExpr());
      if (IsOp(",")) {
        auto tup = New(Expr::K::kTuple, line);
        tup->args.push_back(e);
        while (IsOp(",")) {
          ++i_;
          if (IsOp(")")) break;
          ASSIGN_OR_RETURN(ExprP x, ParseExpr());
          tup->args.push_back(x);
        }
        e = tup;
      }
      RETURN_IF_ERROR(Expect(")"));
      return e;
    }
    if (IsOp("[")) {
      ++i_;
      auto n = New(Expr::K::kList, line);
      while (!IsOp("]")) {
        if (!n->args.empty()) RETURN_IF_ERROR(Expect(","));
        if (IsOp("]")) break;
        ASSIGN_OR_RETURN(ExprP x, ParseExpr());
        n->args.push_back(x);
      }
      ++i_;
      return ExprP(n);
    }
    if (IsOp("{")) {
      ++i_;
      auto n = New(Expr::K::kDict, line);
      while (!IsOp("}")) {
        if (!n->args.empty()) RETURN_IF_ERROR(Expect(","));
        if (IsOp("}")) break;
        ASSIGN_OR_RETURN(ExprP k, ParseExpr());
        RETURN_IF_ERROR(Expect(":"));
        ASSIGN_OR_RETURN(ExprP v, ParseExpr());
        n->args.push_back(k);
        n->args.push_back(v);
      }
      ++i_;
      return ExprP(n);
    }
    return Err(line,
               "unexpected token '" + (t.text.empty() ? std::string("end of tag") : t.text) + "'");
  }

  Status ParseCallArgs(Expr* n) {
    RETURN_IF_ERROR(Expect("("));
    bool first = true;
    while (!IsOp(")")) {
      if (!first) RETURN_IF_ERROR(Expect(","));
      first = false;
      if (IsOp(")")) break;
      if (Cur().t == T::kName && Peek().t == T::kOp && Peek().text == "=") {
        std::string k = Cur().text;
        i_ += 2;
        ASSIGN_OR_RETURN(ExprP v, ParseExpr());
        n->kwargs.emplace_back(k, v);
      } else {
        if (!n->kwargs.empty())
          return Err(Cur().line, "positional argument follows keyword argument");
        ASSIGN_OR_RETURN(ExprP v, ParseExpr());
        n->args.push_back(v);
      }
    }
    ++i_;
    return Status::Ok();
  }

  StatusOr<ExprP> ParsePostfix(ExprP e) {
    while (true) {
      const int line = Cur().line;
      if (IsOp(".")) {
        ++i_;
        auto n = New(Expr::K::kAttr, line);
        n->a = e;
        if (Cur().t == T::kName) {
          n->name = toks_[i_++].text;
        } else if (Cur().t == T::kInt) {
          n->k = Expr::K::kItem;
          auto c = New(Expr::K::kConst, line);
          c->val = toks_[i_++].val;
          n->b = c;
        } else {
          return Err(line, "expected an attribute name");
        }
        e = n;
      } else if (IsOp("[")) {
        ++i_;
        ExprP parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!IsOp(":") && !IsOp("]")) {
            ASSIGN_OR_RETURN(parts[k], ParseExpr());
          }
          if (k < 2 && IsOp(":")) {
            slice = true;
            ++i_;
          } else {
            break;
          }
        }
        RETURN_IF_ERROR(Expect("]"));
        auto n = New(slice ? Expr::K::kSlice : Expr::K::kItem, line);
        n->a = e;
        n->b = parts[0];
        n->c = parts[1];
        n->args.push_back(parts[2]);
        if (!slice && !parts[0]) return Err(line, "expected a subscript");
        e = n;
      } else if (IsOp("(")) {
        auto n = New(Expr::K::kCall, line);
        n->a = e;
        RETURN_IF_ERROR(ParseCallArgs(n.get()));
        e = n;
      } else {
        return e;
      }
    }
  }

  StatusOr<ExprP> ParseFilterChain(ExprP e, bool first_without_pipe = false) {
    bool need_pipe = !first_without_pipe;
    while (!need_pipe || IsOp("|")) {
      if (need_pipe) ++i_;
      need_pipe = true;
      auto n = New(Expr::K::kFilter, Cur().line);
      ASSIGN_OR_RETURN(n->name, Name());
      while (IsOp(".")) {  // dotted filter names
        ++i_;
        ASSIGN_OR_RETURN(std::string more, Name());
        n->name += "." + more;
      }
      if (IsOp("(")) RETURN_IF_ERROR(ParseCallArgs(n.get()));
      n->a = e;
      e = n;
    }
    return e;
  }

  StatusOr<ExprP> ParseFilterExpr(ExprP e) {
    while (true) {
      if (IsOp("|")) {
        ASSIGN_OR_RETURN(e, ParseFilterChain(e));
        // a filter's result takes postfix calls too: x|f(...)
      } else if (IsName("is")) {
        auto n = New(Expr::K::kTest, Cur().line);
        ++i_;
        if (IsName("not")) {
          n->negated = true;
          ++i_;
        }
        ASSIGN_OR_RETURN(n->name, Name());
        while (IsOp(".")) {
          ++i_;
          ASSIGN_OR_RETURN(std::string more, Name());
          n->name += "." + more;
        }
        n->a = e;
        if (IsOp("(")) {
          RETURN_IF_ERROR(ParseCallArgs(n.get()));
        } else if ((Cur().t == T::kName || Cur().t == T::kString || Cur().t == T::kInt ||
                    Cur().t == T::kFloat || IsOp("(") || IsOp("[") || IsOp("{")) &&
                   !IsName("else") && !IsName("or") && !IsName("and")) {
          if (IsName("is")) return Err(Cur().line, "You cannot chain multiple tests with is");
          ASSIGN_OR_RETURN(ExprP arg, ParsePrimary());
          ASSIGN_OR_RETURN(arg, ParsePostfix(arg));
          n->args.push_back(arg);
        }
        e = n;
      } else if (IsOp("(")) {
        auto n = New(Expr::K::kCall, Cur().line);
        n->a = e;
        RETURN_IF_ERROR(ParseCallArgs(n.get()));
        e = n;
      } else {
        return e;
      }
    }
  }

  std::vector<Token> toks_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

StatusOr<Body> ParseTemplate(std::string_view source) {
  ASSIGN_OR_RETURN(auto toks, lex::Lex(source));
  return Parser(std::move(toks)).Run();
}

}  // namespace sluice::chat
