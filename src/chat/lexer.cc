// Lexer of the Jinja2 subset (lexer.h).
#include "chat/lexer.h"

#include <cstring>
#include <string>

namespace sluice::chat::lex {

Status Err(int line, const std::string& msg) {
  return InvalidArgument("template syntax error at line " + std::to_string(line) + ": " + msg);
}

namespace {

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

}  // namespace

StatusOr<std::vector<Token>> Lex(std::string_view source) { return Lexer(source).Run(); }

}  // namespace sluice::chat::lex
