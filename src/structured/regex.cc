#include "structured/regex.h"

#include <string>

namespace sluice::structured {

namespace {

constexpr uint32_t kMaxCp = 0x10FFFF;
constexpr int kMaxRepeat = 100000;

struct RNode {
  enum T { kSet, kCat, kAlt, kRep, kBol, kEol } t = kCat;
  Ranges set;
  std::vector<RNode> kids;
  int min = 0, max = -1;
  size_t pos = 0;
};

Ranges Digits() { return {{'0', '9'}}; }
Ranges Word() { return {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}}; }
Ranges Space() {
  return {{'\t', '\r'},     {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
          {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
}

class Parser {
 public:
  explicit Parser(std::string_view p) : src_(p) {}

  Status Decode() {
    for (size_t i = 0; i < src_.size();) {
      const auto c = static_cast<uint8_t>(src_[i]);
      int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (len == 0 || i + static_cast<size_t>(len) > src_.size()) {
        return InvalidArgument("pattern is not valid UTF-8 at byte " + std::to_string(i));
      }
      uint32_t cp = len == 1 ? c : c & (0x7F >> len);
      for (int k = 1; k < len; ++k) {
        const auto cc = static_cast<uint8_t>(src_[i + static_cast<size_t>(k)]);
        if ((cc & 0xC0) != 0x80) {
          return InvalidArgument("pattern is not valid UTF-8 at byte " + std::to_string(i));
        }
        cp = (cp << 6) | (cc & 0x3F);
      }
      cps_.push_back(cp);
      i += static_cast<size_t>(len);
    }
    return Status::Ok();
  }

  StatusOr<RNode> Parse() {
    RETURN_IF_ERROR(Decode());
    ASSIGN_OR_RETURN(RNode n, ParseAlt());
    if (i_ < cps_.size()) return Err("unmatched ')'");
    return n;
  }

 private:
  Status Err(const std::string& what) const {
    return InvalidArgument("regex: " + what + " at offset " + std::to_string(i_));
  }
  bool At(uint32_t c) const { return i_ < cps_.size() && cps_[i_] == c; }
  bool Eof() const { return i_ >= cps_.size(); }

  StatusOr<RNode> ParseAlt() {
    RNode alt;
    alt.t = RNode::kAlt;
    alt.pos = i_;
    while (true) {
      ASSIGN_OR_RETURN(RNode cat, ParseCat());
      alt.kids.push_back(std::move(cat));
      if (!At('|')) break;
      ++i_;
    }
    if (alt.kids.size() == 1) return std::move(alt.kids[0]);
    return alt;
  }

  StatusOr<RNode> ParseCat() {
    RNode cat;
    cat.t = RNode::kCat;
    cat.pos = i_;
    while (!Eof() && !At('|') && !At(')')) {
      ASSIGN_OR_RETURN(RNode atom, ParseAtom());
      ASSIGN_OR_RETURN(atom, ParseQuantifiers(std::move(atom)));
      cat.kids.push_back(std::move(atom));
    }
    return cat;
  }

  // {n}, {n,}, {n,m} at i_; false (and i_ unchanged) when it is not a quantifier.
  bool Braces(int* mn, int* mx) {
    size_t j = i_ + 1;
    auto num = [&](int* out) {
      const size_t s = j;
      long v = 0;
      while (j < cps_.size() && cps_[j] >= '0' && cps_[j] <= '9') {
        v = std::min<long>(v * 10 + (cps_[j] - '0'), 1L << 30);
        ++j;
      }
      *out = static_cast<int>(v);
      return j > s;
    };
    if (!num(mn)) return false;
    *mx = *mn;
    if (j < cps_.size() && cps_[j] == ',') {
      ++j;
      if (!num(mx)) *mx = -1;
    }
    if (j >= cps_.size() || cps_[j] != '}') return false;
    i_ = j + 1;
    return true;
  }

  StatusOr<RNode> ParseQuantifiers(RNode atom) {
    bool quantified = false;
    while (!Eof()) {
      const size_t pos = i_;
      int mn = 0, mx = -1;
      if (At('*')) {
        ++i_;
      } else if (At('+')) {
        mn = 1;
        ++i_;
      } else if (At('?')) {
        mx = 1;
        ++i_;
      } else if (At('{') && Braces(&mn, &mx)) {
        if (mx >= 0 && mx < mn) {
          i_ = pos;
          return Err("quantifier {" + std::to_string(mn) + "," + std::to_string(mx) +
                     "} with max < min");
        }
        if (mn > kMaxRepeat || mx > kMaxRepeat) {
          i_ = pos;
          return Err("repetition count over " + std::to_string(kMaxRepeat));
        }
      } else {
        break;
      }
      if (quantified) {
        i_ = pos;
        return Err("nothing to repeat (a quantifier after a quantifier)");
      }
      if (atom.t == RNode::kBol || atom.t == RNode::kEol) {
        i_ = pos;
        return Err("quantified anchor");
      }
      quantified = true;
      if (At('?')) {
        ++i_;  // lazy: the same language
      } else if (At('+')) {
        return Err("possessive quantifier is not supported");
      }
      RNode rep;
      rep.t = RNode::kRep;
      rep.pos = pos;
      rep.min = mn;
      rep.max = mx;
      rep.kids.push_back(std::move(atom));
      atom = std::move(rep);
    }
    return atom;
  }

  static RNode Set(Ranges r, size_t pos) {
    RNode n;
    n.t = RNode::kSet;
    n.set = Normalize(std::move(r));
    n.pos = pos;
    return n;
  }

  StatusOr<uint32_t> Hex(int digits) {
    uint32_t v = 0;
    for (int k = 0; k < digits; ++k) {
      if (Eof()) return Err("truncated hex escape");
      const uint32_t c = cps_[i_];
      int d = c >= '0' && c <= '9'   ? static_cast<int>(c - '0')
              : c >= 'a' && c <= 'f' ? static_cast<int>(c - 'a' + 10)
              : c >= 'A' && c <= 'F' ? static_cast<int>(c - 'A' + 10)
                                     : -1;
      if (d < 0) return Err("bad hex escape");
      v = v * 16 + static_cast<uint32_t>(d);
      ++i_;
    }
    return v;
  }

  // After a backslash: a set of code points (in_class: inside [...], where \b is backspace).
  StatusOr<Ranges> Escape(bool in_class) {
    if (Eof()) return Err("pattern ends with a backslash");
    const uint32_t c = cps_[i_];
    const size_t pos = i_ - 1;
    ++i_;
    auto one = [](uint32_t x) { return Ranges{{x, x}}; };
    switch (c) {
      case 'd':
        return Digits();
      case 'D':
        return Complement(Digits(), kMaxCp);
      case 'w':
        return Word();
      case 'W':
        return Complement(Word(), kMaxCp);
      case 's':
        return Space();
      case 'S':
        return Complement(Space(), kMaxCp);
      case 'n':
        return one('\n');
      case 'r':
        return one('\r');
      case 't':
        return one('\t');
      case 'f':
        return one('\f');
      case 'v':
        return one('\v');
      case 'b':
        if (in_class) return one('\b');
        i_ = pos;
        return Err("word boundary \\b is not supported");
      case 'B':
        i_ = pos;
        return Err("word boundary \\B is not supported");
      case '0':
        if (!Eof() && cps_[i_] >= '0' && cps_[i_] <= '9') {
          i_ = pos;
          return Err("octal escape is not supported");
        }
        return one(0);
      case 'x': {
        ASSIGN_OR_RETURN(uint32_t v, Hex(2));
        return one(v);
      }
      case 'u': {
        uint32_t v = 0;
        if (At('{')) {
          ++i_;
          const size_t s = i_;
          while (!Eof() && !At('}')) {
            ASSIGN_OR_RETURN(uint32_t d, Hex(1));
            v = v * 16 + d;
            if (v > kMaxCp) return Err("\\u{...} escape beyond U+10FFFF");
          }
          if (Eof() || i_ == s) return Err("bad \\u{...} escape");
          ++i_;
        } else {
          ASSIGN_OR_RETURN(v, Hex(4));
          if (v >= 0xD800 && v <= 0xDBFF && i_ + 1 < cps_.size() && cps_[i_] == '\\' &&
              cps_[i_ + 1] == 'u') {
            const size_t save = i_;
            i_ += 2;
            auto lo = Hex(4);
            if (lo.ok() && *lo >= 0xDC00 && *lo <= 0xDFFF) {
              v = 0x10000 + ((v - 0xD800) << 10) + (*lo - 0xDC00);
            } else {
              i_ = save;
            }
          }
        }
        if (v >= 0xD800 && v <= 0xDFFF) {
          i_ = pos;
          return Err("lone surrogate escape");
        }
        return one(v);
      }
      case 'c': {
        if (!Eof() &&
            ((cps_[i_] >= 'a' && cps_[i_] <= 'z') || (cps_[i_] >= 'A' && cps_[i_] <= 'Z'))) {
          const uint32_t v = cps_[i_] % 32;
          ++i_;
          return one(v);
        }
        i_ = pos;
        return Err("bad \\c escape");
      }
      case 'p':
      case 'P':
        i_ = pos;
        return Err("Unicode property escape \\" + std::string(1, static_cast<char>(c)) +
                   " is not supported");
      case 'k':
        i_ = pos;
        return Err("backreference \\k is not supported");
      default:
        break;
    }
    if (c >= '1' && c <= '9') {
      i_ = pos;
      return Err("backreference is not supported");
    }
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_') {
      i_ = pos;
      return Err("unknown escape \\" + std::string(1, static_cast<char>(c)));
    }
    return one(c);  // an escaped punctuation or other character stands for itself
  }

  StatusOr<RNode> ParseClass() {
    const size_t pos = i_;
    ++i_;  // [
    bool negate = false;
    if (At('^')) {
      negate = true;
      ++i_;
    }
    Ranges r;
    bool first = true;
    while (true) {
      if (Eof()) {
        i_ = pos;
        return Err("unterminated character class");
      }
      if (At(']') && !first) break;
      if (At(']') && first) {
        // ECMAScript: [] matches nothing and [^] anything.
        break;
      }
      first = false;
      // One class atom: a single character (may start a range) or a class escape.
      auto atom = [&]() -> StatusOr<Ranges> {
        if (At('\\')) {
          ++i_;
          return Escape(true);
        }
        if (At('[') && i_ + 1 < cps_.size() &&
            (cps_[i_ + 1] == ':' || cps_[i_ + 1] == '=' || cps_[i_ + 1] == '.')) {
          return Err("POSIX class syntax inside [...] is not supported");
        }
        const uint32_t c = cps_[i_++];
        return Ranges{{c, c}};
      };
      ASSIGN_OR_RETURN(Ranges a, atom());
      if (At('-') && i_ + 1 < cps_.size() && cps_[i_ + 1] != ']') {
        ++i_;
        ASSIGN_OR_RETURN(Ranges b, atom());
        if (a.size() != 1 || b.size() != 1 || a[0].first != a[0].second ||
            b[0].first != b[0].second) {
          return Err("class escape as a range bound");
        }
        if (b[0].first < a[0].first) return Err("range out of order in character class");
        r.emplace_back(a[0].first, b[0].first);
      } else {
        r.insert(r.end(), a.begin(), a.end());
      }
    }
    ++i_;  // ]
    r = Normalize(std::move(r));
    if (negate) r = Complement(r, kMaxCp);
    return Set(std::move(r), pos);
  }

  StatusOr<RNode> ParseAtom() {
    const size_t pos = i_;
    const uint32_t c = cps_[i_];
    switch (c) {
      case '(': {
        ++i_;
        if (At('?')) {
          ++i_;
          if (At(':')) {
            ++i_;
          } else if (At('<') && i_ + 1 < cps_.size() && cps_[i_ + 1] != '=' &&
                     cps_[i_ + 1] != '!') {
            while (!Eof() && !At('>')) ++i_;
            if (Eof()) return Err("unterminated group name");
            ++i_;
          } else if (At('P') && i_ + 1 < cps_.size() && cps_[i_ + 1] == '<') {
            while (!Eof() && !At('>')) ++i_;
            if (Eof()) return Err("unterminated group name");
            ++i_;
          } else if (At('=') || At('!')) {
            i_ = pos;
            return Err("lookahead is not supported");
          } else if (At('<')) {
            i_ = pos;
            return Err("lookbehind is not supported");
          } else if (At('P')) {
            i_ = pos;
            return Err("named backreference (?P=...) is not supported");
          } else {
            i_ = pos;
            return Err("inline flags or group modifiers (?...) are not supported");
          }
        }
        ASSIGN_OR_RETURN(RNode inner, ParseAlt());
        if (!At(')')) {
          i_ = pos;
          return Err("unterminated group");
        }
        ++i_;
        return inner;
      }
      case ')':
        return Err("unmatched ')'");
      case '[':
        return ParseClass();
      case '.':
        ++i_;
        return Set(Complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, kMaxCp), pos);
      case '^': {
        ++i_;
        RNode n;
        n.t = RNode::kBol;
        n.pos = pos;
        return n;
      }
      case '$': {
        ++i_;
        RNode n;
        n.t = RNode::kEol;
        n.pos = pos;
        return n;
      }
      case '\\': {
        ++i_;
        ASSIGN_OR_RETURN(Ranges r, Escape(false));
        return Set(std::move(r), pos);
      }
      case '*':
      case '+':
      case '?':
        return Err("nothing to repeat");
      case '{': {
        int a, b;
        const size_t save = i_;
        if (Braces(&a, &b)) {
          i_ = save;
          return Err("nothing to repeat");
        }
        ++i_;
        return Set({{c, c}}, pos);
      }
      default:
        ++i_;
        return Set({{c, c}}, pos);
    }
  }

  std::string_view src_;
  std::vector<uint32_t> cps_;
  size_t i_ = 0;
};

Status AnchorError(const RNode& n) {
  return InvalidArgument(std::string("regex: anchor ") + (n.t == RNode::kBol ? "^" : "$") +
                         " at offset " + std::to_string(n.pos) +
                         " is not supported (only ^ at the start and $ at the end)");
}

StatusOr<ExprP> Lower(const RNode& n) {
  switch (n.t) {
    case RNode::kSet:
      return Codepoints(n.set);
    case RNode::kBol:
    case RNode::kEol:
      return AnchorError(n);
    case RNode::kCat:
    case RNode::kAlt: {
      std::vector<ExprP> k;
      for (const RNode& c : n.kids) {
        ASSIGN_OR_RETURN(ExprP e, Lower(c));
        k.push_back(std::move(e));
      }
      return n.t == RNode::kCat ? Concat(std::move(k)) : Alt(std::move(k));
    }
    case RNode::kRep: {
      ASSIGN_OR_RETURN(ExprP e, Lower(n.kids[0]));
      return Repeat(std::move(e), n.min, n.max);
    }
  }
  return Internal("regex: bad node");
}

// One top-level alternative: leading ^ and trailing $ stripped (and reported).
StatusOr<ExprP> LowerBranch(const RNode& branch, RegexMode mode) {
  std::vector<const RNode*> items;
  if (branch.t == RNode::kCat) {
    for (const RNode& k : branch.kids) items.push_back(&k);
  } else {
    items.push_back(&branch);
  }
  bool bol = false, eol = false;
  size_t b = 0, e = items.size();
  while (b < e && items[b]->t == RNode::kBol) {
    bol = true;
    ++b;
  }
  while (e > b && items[e - 1]->t == RNode::kEol) {
    eol = true;
    --e;
  }
  // A single group spanning the branch may hold the anchors of its own alternatives.
  if (!bol && !eol && e - b == 1 && items[b]->t == RNode::kCat && &branch != items[b]) {
    return LowerBranch(*items[b], mode);
  }
  if (!bol && !eol && e - b == 1 && items[b]->t == RNode::kAlt) {
    std::vector<ExprP> alts;
    for (const RNode& a : items[b]->kids) {
      ASSIGN_OR_RETURN(ExprP x, LowerBranch(a, mode));
      alts.push_back(std::move(x));
    }
    return Alt(std::move(alts));
  }
  std::vector<ExprP> parts;
  if (mode == RegexMode::kSearch && !bol) parts.push_back(Star(AnyCodepoint()));
  for (size_t i = b; i < e; ++i) {
    ASSIGN_OR_RETURN(ExprP x, Lower(*items[i]));
    parts.push_back(std::move(x));
  }
  if (mode == RegexMode::kSearch && !eol) parts.push_back(Star(AnyCodepoint()));
  return Concat(std::move(parts));
}

}  // namespace

ExprP AnyCodepoint() {
  static const ExprP e = Codepoints({{0, kMaxCp}});
  return e;
}

StatusOr<ExprP> ParseRegex(std::string_view pattern, RegexMode mode) {
  Parser p(pattern);
  ASSIGN_OR_RETURN(RNode root, p.Parse());
  if (root.t == RNode::kAlt) {
    std::vector<ExprP> alts;
    for (const RNode& a : root.kids) {
      ASSIGN_OR_RETURN(ExprP x, LowerBranch(a, mode));
      alts.push_back(std::move(x));
    }
    return Alt(std::move(alts));
  }
  return LowerBranch(root, mode);
}

}  // namespace sluice::structured
