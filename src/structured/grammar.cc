#include "structured/grammar.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <string>
#include <vector>

namespace sluice::structured {

namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;

// A parsed rule body: alternatives of sequences of items.
struct GNode {
  enum T { kLit, kClass, kRef, kGroup } t = kLit;
  std::string lit;  // UTF-8 bytes
  Ranges cls;
  std::string ref;
  std::vector<std::vector<GNode>> alts;  // kGroup
  int min = 1, max = 1;
  size_t line = 0, col = 0;
};

class GParser {
 public:
  explicit GParser(std::string_view s) : s_(s) {}

  Status Parse(std::map<std::string, GNode>* rules, std::vector<std::string>* order) {
    while (true) {
      SkipSpace(true);
      if (i_ >= s_.size()) break;
      std::string name = Name();
      if (name.empty()) return Err("expected a rule name");
      SkipSpace(false);
      if (s_.substr(i_, 3) != "::=") return Err("expected ::= after rule name \"" + name + "\"");
      i_ += 3;
      GNode body;
      body.t = GNode::kGroup;
      body.line = line_;
      RETURN_IF_ERROR(Alternatives(&body.alts, /*nested=*/false));
      if (rules->count(name)) return Err("rule \"" + name + "\" defined twice");
      order->push_back(name);
      (*rules)[name] = std::move(body);
    }
    return Status::Ok();
  }

 private:
  Status Err(const std::string& what) const {
    return InvalidArgument("grammar: " + what + " at line " + std::to_string(line_) + ", column " +
                           std::to_string(i_ - line_start_ + 1));
  }

  // Spaces and comments; newlines too when `newlines` (between rules, or inside groups).
  void SkipSpace(bool newlines) {
    while (i_ < s_.size()) {
      const char c = s_[i_];
      if (c == '#') {
        while (i_ < s_.size() && s_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r') {
        ++i_;
      } else if (c == '\n' && newlines) {
        ++i_;
        ++line_;
        line_start_ = i_;
      } else {
        break;
      }
    }
  }

  // A newline continues the rule when the next line does not start a new rule.
  bool ContinuesAfterNewline() {
    size_t j = i_;
    while (j < s_.size() && (s_[j] == '\n' || s_[j] == ' ' || s_[j] == '\t' || s_[j] == '\r')) ++j;
    size_t k = j;
    while (k < s_.size() && IsNameChar(s_[k])) ++k;
    size_t m = k;
    while (m < s_.size() && (s_[m] == ' ' || s_[m] == '\t')) ++m;
    return !(k > j && s_.substr(m, 3) == "::=") && j < s_.size();
  }

  static bool IsNameChar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  std::string Name() {
    const size_t b = i_;
    while (i_ < s_.size() && IsNameChar(s_[i_])) ++i_;
    return std::string(s_.substr(b, i_ - b));
  }

  void Space(bool nested) {
    while (true) {
      SkipSpace(false);
      if (i_ < s_.size() && s_[i_] == '\n' && (nested || ContinuesAfterNewline())) {
        ++i_;
        ++line_;
        line_start_ = i_;
        continue;
      }
      break;
    }
  }

  Status Alternatives(std::vector<std::vector<GNode>>* alts, bool nested) {
    alts->emplace_back();
    while (true) {
      Space(nested);
      if (i_ >= s_.size()) break;
      const char c = s_[i_];
      if (c == '\n') break;  // end of rule
      if (c == ')') {
        if (!nested) return Err("unmatched ')'");
        break;
      }
      if (c == '|') {
        ++i_;
        alts->emplace_back();
        continue;
      }
      GNode item;
      RETURN_IF_ERROR(Item(&item));
      RETURN_IF_ERROR(Quantifier(&item));
      alts->back().push_back(std::move(item));
    }
    return Status::Ok();
  }

  StatusOr<uint32_t> Hex(int n) {
    uint32_t v = 0;
    for (int k = 0; k < n; ++k) {
      if (i_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[i_])))
        return Err("bad hex escape");
      const char c = s_[i_++];
      v = v * 16 + static_cast<uint32_t>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
  }

  // One character of a literal or class (escape or UTF-8).
  StatusOr<uint32_t> Char() {
    if (i_ >= s_.size()) return Err("unexpected end");
    auto c = static_cast<uint8_t>(s_[i_]);
    if (c == '\\') {
      ++i_;
      if (i_ >= s_.size()) return Err("unexpected end after \\");
      const char e = s_[i_++];
      switch (e) {
        case 'n':
          return uint32_t{'\n'};
        case 'r':
          return uint32_t{'\r'};
        case 't':
          return uint32_t{'\t'};
        case 'x':
          return Hex(2);
        case 'u':
          return Hex(4);
        case 'U':
          return Hex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
          return static_cast<uint32_t>(e);
        default:
          --i_;
          return Err(std::string("unknown escape \\") + e);
      }
    }
    const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 0 || i_ + static_cast<size_t>(len) > s_.size()) return Err("invalid UTF-8");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k)
      cp = (cp << 6) | (static_cast<uint8_t>(s_[i_ + static_cast<size_t>(k)]) & 0x3F);
    i_ += static_cast<size_t>(len);
    return cp;
  }

  Status Item(GNode* n) {
    n->line = line_;
    n->col = i_ - line_start_ + 1;
    const char c = s_[i_];
    if (c == '"') {
      ++i_;
      n->t = GNode::kLit;
      while (true) {
        if (i_ >= s_.size() || s_[i_] == '\n') return Err("unterminated string literal");
        if (s_[i_] == '"') {
          ++i_;
          break;
        }
        ASSIGN_OR_RETURN(uint32_t cp, Char());
        if (cp > kMaxCp || (cp >= 0xD800 && cp <= 0xDFFF)) return Err("invalid code point");
        AppendUtf8(cp, &n->lit);
      }
      return Status::Ok();
    }
    if (c == '[') {
      ++i_;
      n->t = GNode::kClass;
      bool neg = false;
      if (i_ < s_.size() && s_[i_] == '^') {
        neg = true;
        ++i_;
      }
      Ranges r;
      while (true) {
        if (i_ >= s_.size() || s_[i_] == '\n') return Err("unterminated character class");
        if (s_[i_] == ']') {
          ++i_;
          break;
        }
        ASSIGN_OR_RETURN(uint32_t a, Char());
        uint32_t b = a;
        if (i_ + 1 < s_.size() && s_[i_] == '-' && s_[i_ + 1] != ']') {
          ++i_;
          ASSIGN_OR_RETURN(b, Char());
          if (b < a) return Err("range out of order in character class");
        }
        r.emplace_back(a, b);
      }
      n->cls = neg ? Complement(r, kMaxCp) : Normalize(r);
      return Status::Ok();
    }
    if (c == '.') {
      ++i_;
      n->t = GNode::kClass;
      n->cls = {{0, kMaxCp}};
      return Status::Ok();
    }
    if (c == '(') {
      ++i_;
      n->t = GNode::kGroup;
      RETURN_IF_ERROR(Alternatives(&n->alts, /*nested=*/true));
      if (i_ >= s_.size() || s_[i_] != ')') return Err("unterminated group");
      ++i_;
      return Status::Ok();
    }
    if (IsNameChar(c)) {
      n->t = GNode::kRef;
      n->ref = Name();
      return Status::Ok();
    }
    return Err(std::string("unexpected character '") + c + "'");
  }

  Status Quantifier(GNode* n) {
    if (i_ >= s_.size()) return Status::Ok();
    const char c = s_[i_];
    int mn = 1, mx = 1;
    if (c == '*') {
      mn = 0;
      mx = -1;
      ++i_;
    } else if (c == '+') {
      mn = 1;
      mx = -1;
      ++i_;
    } else if (c == '?') {
      mn = 0;
      mx = 1;
      ++i_;
    } else if (c == '{') {
      ++i_;
      auto num = [&](int* out) {
        const size_t b = i_;
        long v = 0;
        while (i_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[i_])))
          v = std::min<long>(v * 10 + (s_[i_++] - '0'), 1L << 20);
        *out = static_cast<int>(v);
        return i_ > b;
      };
      SkipSpace(false);
      if (!num(&mn)) return Err("expected a number in {...}");
      SkipSpace(false);
      mx = mn;
      if (i_ < s_.size() && s_[i_] == ',') {
        ++i_;
        SkipSpace(false);
        if (!num(&mx)) mx = -1;
        SkipSpace(false);
      }
      if (i_ >= s_.size() || s_[i_] != '}') return Err("expected } after repetition");
      ++i_;
      if (mx >= 0 && mx < mn) return Err("repetition with max < min");
      if (mn > 10000 || mx > 10000) return Err("repetition count over 10000");
    } else {
      return Status::Ok();
    }
    if (n->min != 1 || n->max != 1) return Err("nothing to repeat");
    n->min = mn;
    n->max = mx;
    if (i_ < s_.size() && (s_[i_] == '*' || s_[i_] == '+' || s_[i_] == '?' || s_[i_] == '{')) {
      return Err("a quantifier after a quantifier");
    }
    return Status::Ok();
  }

  std::string_view s_;
  size_t i_ = 0, line_ = 1, line_start_ = 0;
};

class Lowerer {
 public:
  explicit Lowerer(const std::map<std::string, GNode>& rules) : rules_(rules) {}

  StatusOr<ExprP> Rule(const std::string& name, const GNode* at) {
    auto it = rules_.find(name);
    if (it == rules_.end()) {
      return InvalidArgument("grammar: rule \"" + name + "\" is not defined" +
                             (at ? " (used at line " + std::to_string(at->line) + ")" : ""));
    }
    auto done = memo_.find(name);
    if (done != memo_.end()) return done->second;
    // A rule used inside itself: a call of its rule (the pushdown automaton's stack).
    if (std::find(stack_.begin(), stack_.end(), name) != stack_.end()) {
      auto r = rule_of_.find(name);
      if (r == rule_of_.end()) r = rule_of_.emplace(name, calls_->Add(name)).first;
      return Ref(calls_, r->second);
    }
    stack_.push_back(name);
    auto e = Node(it->second);
    stack_.pop_back();
    if (!e.ok()) return e;
    memo_[name] = *e;
    auto r = rule_of_.find(name);
    if (r != rule_of_.end()) calls_->bodies[static_cast<size_t>(r->second)] = *e;
    return e;
  }

  const std::shared_ptr<RuleSet>& rules() const { return calls_; }

  StatusOr<ExprP> Node(const GNode& n) {
    ExprP base;
    switch (n.t) {
      case GNode::kLit:
        base = Literal(n.lit);
        break;
      case GNode::kClass:
        base = Codepoints(n.cls);
        break;
      case GNode::kRef: {
        ASSIGN_OR_RETURN(base, Rule(n.ref, &n));
        break;
      }
      case GNode::kGroup: {
        std::vector<ExprP> alts;
        for (const auto& seq : n.alts) {
          std::vector<ExprP> parts;
          for (const GNode& item : seq) {
            ASSIGN_OR_RETURN(ExprP x, Node(item));
            parts.push_back(std::move(x));
          }
          alts.push_back(Concat(std::move(parts)));
        }
        base = Alt(std::move(alts));
        break;
      }
    }
    return Repeat(base, n.min, n.max);
  }

 private:
  const std::map<std::string, GNode>& rules_;
  std::map<std::string, ExprP> memo_;
  std::vector<std::string> stack_;
  std::shared_ptr<RuleSet> calls_ = std::make_shared<RuleSet>();  // recursive rules
  std::map<std::string, int> rule_of_;
};

}  // namespace

StatusOr<ExprP> CompileGrammar(std::string_view grammar) {
  std::map<std::string, GNode> rules;
  std::vector<std::string> order;
  GParser p(grammar);
  RETURN_IF_ERROR(p.Parse(&rules, &order));
  if (!rules.count("root")) return InvalidArgument("grammar: no rule \"root\"");
  Lowerer l(rules);
  // Every rule is checked (undefined references), not only those root reaches.
  for (const std::string& name : order) RETURN_IF_ERROR(l.Rule(name, nullptr).status());
  ASSIGN_OR_RETURN(ExprP root, l.Rule("root", nullptr));
  return WithRules(root, l.rules());
}

}  // namespace sluice::structured
