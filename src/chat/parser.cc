// Lexer and parser of the Jinja2 subset (docs/chat_templates.md), with the whitespace rules
// of jinja2 under trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=False.
#include <cstring>
#include <string>

#include "chat/ast.h"

namespace sluice::chat {
namespace {

constexpr int kMaxNesting = 200;  // expression and statement nesting

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

Status Err(int line, const std::string& msg) {
  return InvalidArgument("template syntax error at line " + std::to_string(line) + ": " + msg);
}

bool IsWs(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool IsNameStart(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool IsNameChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

void AppendCp(uint32_t cp, std::string* out) { *out += Utf8Encode(std::u32string(1, cp)); }

// Decodes a string literal body with Python's unicode-escape rules.
std::string Unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    const char c = s[++i];
    auto hex = [&](size_t n) -> bool {
      if (i + n >= s.size() + 0 && i + n > s.size() - 1 + 1) return false;
      uint32_t cp = 0;
      for (size_t k = 1; k <= n; ++k) {
        if (i + k >= s.size() || !std::isxdigit(static_cast<unsigned char>(s[i + k]))) return false;
        cp = cp * 16 + std::stoi(std::string(1, s[i + k]), nullptr, 16);
      }
      AppendCp(cp, &out);
      i += n;
      return true;
    };
    switch (c) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'a':
        out += '\a';
        break;
      case 'b':
        out += '\b';
        break;
      case 'f':
        out += '\f';
        break;
      case 'v':
        out += '\v';
        break;
      case '\\':
        out += '\\';
        break;
      case '\'':
        out += '\'';
        break;
      case '"':
        out += '"';
        break;
      case '\n':
        break;
      case 'x':
        if (!hex(2)) {
          out += "\\x";
        }
        break;
      case 'u':
        if (!hex(4)) {
          out += "\\u";
        }
        break;
      case 'U':
        if (!hex(8)) {
          out += "\\U";
        }
        break;
      default:
        if (c >= '0' && c <= '7') {
          uint32_t cp = c - '0';
          for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k)
            cp = cp * 8 + (s[++i] - '0');
          AppendCp(cp, &out);
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string_view src) : src_(src) {}

  StatusOr<std::vector<Token>> Run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t at = pos;
      while (true) {
        at = src_.find('{', at);
        if (at == std::string_view::npos || at + 1 >= src_.size()) {
          at = src_.size();
          break;
        }
        const char n = src_[at + 1];
        if (n == '{' || n == '%' || n == '#') break;
        ++at;
      }
      std::string text(src_.substr(pos, at - pos));
      if (at < src_.size()) {
        const char kind = src_[at + 1];
        const char sign = at + 2 < src_.size() ? src_[at + 2] : 0;
        if (sign == '-') {
          size_t e = text.size();
          while (e > 0 && IsWs(text[e - 1])) --e;
          text.resize(e);
        } else if (sign != '+' && kind != '{') {
          const size_t nl = text.rfind('\n');
          const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
          if (l_pos > 0 || line_starting) {
            bool ws = true;
            for (size_t k = l_pos; k < text.size(); ++k) ws = ws && IsWs(text[k]);
            if (ws) text.resize(l_pos);
          }
        }
      }
      Emit(T::kText, text, pos);
      if (at >= src_.size()) break;
      const char kind = src_[at + 1];
      size_t p = at + 2;
      if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
      size_t end;  // index just past the tag
      char end_sign = 0;
      if (kind == '#') {
        const size_t close = src_.find("#}", p);
        if (close == std::string_view::npos) return Err(LineAt(at), "unterminated comment");
        if (close > p && (src_[close - 1] == '-' || src_[close - 1] == '+'))
          end_sign = src_[close - 1];
        end = close + 2;
      } else {
        tokens_.push_back({kind == '{' ? T::kVarBegin : T::kBlockBegin, "", LineAt(at), {}});
        auto r = LexTag(p, kind == '{' ? '}' : '%');
        if (!r.ok()) return r.status();
        end = *r;
        end_sign = end_sign_;
        // raw blocks: {% raw %}...{% endraw %}
        if (kind == '%' && tokens_.size() >= 3 && tokens_[tokens_.size() - 2].t == T::kName &&
            tokens_[tokens_.size() - 2].text == "raw" &&
            tokens_[tokens_.size() - 3].t == T::kBlockBegin) {
          tokens_.resize(tokens_.size() - 3);
          size_t search = end;
          size_t body_end = std::string_view::npos, after = 0;
          while ((search = src_.find("{%", search)) != std::string_view::npos) {
            size_t q = search + 2;
            const bool minus = q < src_.size() && src_[q] == '-';
            if (minus || (q < src_.size() && src_[q] == '+')) ++q;
            while (q < src_.size() && IsWs(src_[q])) ++q;
            if (src_.substr(q, 6) == "endraw") {
              q += 6;
              while (q < src_.size() && IsWs(src_[q])) ++q;
              char es = 0;
              if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) es = src_[q++];
              if (src_.substr(q, 2) == "%}") {
                body_end = search;
                after = q + 2;
                std::string body(src_.substr(end, body_end - end));
                if (end_sign == '-')
                  body.erase(0, body.find_first_not_of(" \t\n\r\v\f") == std::string::npos
                                    ? body.size()
                                    : body.find_first_not_of(" \t\n\r\v\f"));
                else if (end_sign != '+' && !body.empty() && body[0] == '\n')
                  body.erase(0, 1);
                if (minus) {
                  while (!body.empty() && IsWs(body.back())) body.pop_back();
                } else if (!(q - 0 > 0 && src_[search + 2] == '+')) {
                  const size_t nl = body.rfind('\n');
                  const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
                  bool ws = true;
                  for (size_t k = l_pos; k < body.size(); ++k) ws = ws && IsWs(body[k]);
                  if (ws && l_pos > 0) body.resize(l_pos);
                }
                Emit(T::kText, body, end);
                end = after;
                end_sign = es;
                break;
              }
            }
            search += 2;
          }
          if (body_end == std::string_view::npos) return Err(LineAt(at), "missing endraw");
        }
      }
      pos = end;
      if (end_sign == '-') {
        while (pos < src_.size() && IsWs(src_[pos])) ++pos;
        line_starting = pos > end && src_[pos - 1] == '\n';
      } else if (kind != '{' && end_sign != '+' && pos < src_.size() && src_[pos] == '\n') {
        ++pos;
        line_starting = true;
      } else {
        line_starting = false;
      }
    }
    tokens_.push_back({T::kEof, "", LineAt(src_.size()), {}});
    return std::move(tokens_);
  }

 private:
  int LineAt(size_t pos) {
    while (line_pos_ < pos && line_pos_ < src_.size()) {
      if (src_[line_pos_] == '\n') ++line_;
      ++line_pos_;
    }
    return line_;
  }
  void Emit(T t, const std::string& text, size_t pos) {
    if (t == T::kText && text.empty()) return;
    tokens_.push_back({t, text, LineAt(pos), {}});
  }

  // Lexes expression tokens from p to the closing `}}` / `%}`; returns the index past it.
  StatusOr<size_t> LexTag(size_t p, char close) {
    int depth = 0;
    end_sign_ = 0;
    const int start_line = LineAt(p);
    while (true) {
      while (p < src_.size() && IsWs(src_[p])) ++p;
      if (p >= src_.size()) return Err(start_line, "unexpected end of template inside a tag");
      const int line = LineAt(p);
      const std::string_view rest = src_.substr(p);
      if (depth == 0) {
        for (char sign : {'-', '+', '\0'}) {
          std::string endtok = sign ? std::string(1, sign) : "";
          endtok += close;
          endtok += '}';
          if (sign == '+' && close == '}') continue;
          if (rest.substr(0, endtok.size()) == endtok) {
            tokens_.push_back({close == '}' ? T::kVarEnd : T::kBlockEnd, "", line, {}});
            end_sign_ = sign;
            return p + endtok.size();
          }
        }
      }
      const char c = src_[p];
      if (IsNameStart(c)) {
        size_t e = p;
        while (e < src_.size() && IsNameChar(src_[e])) ++e;
        tokens_.push_back({T::kName, std::string(src_.substr(p, e - p)), line, {}});
        p = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        size_t e = p;
        auto digits = [&] {
          while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) ||
                                     (src_[e] == '_' && e + 1 < src_.size() &&
                                      std::isdigit(static_cast<unsigned char>(src_[e + 1])))))
            ++e;
        };
        digits();
        bool is_float = false;
        if (e + 1 < src_.size() && src_[e] == '.' &&
            std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
          ++e;
          digits();
          is_float = true;
        }
        if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
          size_t q = e + 1;
          if (q < src_.size() && (src_[q] == '+' || src_[q] == '-')) ++q;
          if (q < src_.size() && std::isdigit(static_cast<unsigned char>(src_[q]))) {
            e = q;
            digits();
            is_float = true;
          }
        }
        std::string num;
        for (size_t k = p; k < e; ++k) {
          if (src_[k] != '_') num += src_[k];
        }
        Token tok{is_float ? T::kFloat : T::kInt, num, line, {}};
        if (is_float) {
          tok.val = Value::Float(std::strtod(num.c_str(), nullptr));
        } else {
          errno = 0;
          const long long v = std::strtoll(num.c_str(), nullptr, 10);
          if (errno == ERANGE) return Err(line, "integer literal too large");
          tok.val = Value::Int(v);
        }
        tokens_.push_back(std::move(tok));
        p = e;
      } else if (c == '\'' || c == '"') {
        size_t e = p + 1;
        while (e < src_.size() && src_[e] != c) e += src_[e] == '\\' ? 2 : 1;
        if (e >= src_.size()) return Err(line, "unterminated string");
        Token tok{T::kString, "", line, Value::Str(Unescape(src_.substr(p + 1, e - p - 1)))};
        tokens_.push_back(std::move(tok));
        p = e + 1;
      } else {
        static const char* kOps[] = {"//", "**", "==", "!=", "<=", ">=", "+", "-", "*",
                                     "/",  "%",  "~",  "(",  ")",  "[",  "]", "{", "}",
                                     ",",  ".",  ":",  "|",  "=",  "<",  ">"};
        bool found = false;
        for (const char* op : kOps) {
          const size_t n = std::strlen(op);
          if (rest.substr(0, n) == op) {
            if (op[0] == '(' || op[0] == '[' || op[0] == '{') ++depth;
            if (op[0] == ')' || op[0] == ']' || op[0] == '}') {
              if (depth == 0) return Err(line, std::string("unexpected '") + op + "'");
              --depth;
            }
            tokens_.push_back({T::kOp, op, line, {}});
            p += n;
            found = true;
            break;
          }
        }
        if (!found) return Err(line, std::string("unexpected char '") + c + "'");
      }
    }
  }

  std::string_view src_;
  std::vector<Token> tokens_;
  size_t line_pos_ = 0;
  int line_ = 1;
  char end_sign_ = 0;
};

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
  ASSIGN_OR_RETURN(auto toks, Lexer(source).Run());
  return Parser(std::move(toks)).Run();
}

}  // namespace sluice::chat
