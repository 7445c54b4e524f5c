// The lexical side of JSON Schema compilation: the canonical compact spelling of JSON values,
// and the expressions of JSON strings and numbers (ranges, bounds) the compiler builds on.
#include "structured/json_lexical.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>

#include "structured/regex.h"

namespace sluice::structured::json_text {

using simdjson::dom::element_type;
using simdjson::dom::object;

// ---------------------------------------------------------------- canonical serialisation

void AppendQuoted(std::string_view s, std::string* out) {
  static const char* kHex = "0123456789abcdef";
  out->push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          out->push_back(kHex[c >> 4]);
          out->push_back(kHex[c & 15]);
        } else {
          out->push_back(ch);
        }
    }
  }
  out->push_back('"');
}

void AppendDouble(double d, std::string* out) {
  if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.007199254740992e15) {
    *out += std::to_string(static_cast<int64_t>(d));
    return;
  }
  char buf[400];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::fixed);
  if (r.ec != std::errc() || r.ptr - buf > 40) r = std::to_chars(buf, buf + sizeof(buf), d);
  out->append(buf, r.ptr);
}

void AppendCanonical(const element& e, std::string* out) {
  switch (e.type()) {
    case element_type::OBJECT: {
      out->push_back('{');
      std::vector<std::pair<std::string_view, element>> members;
      for (auto [k, v] : object(e)) members.emplace_back(k, v);
      bool first = true;
      for (const auto& [k, v] : members) {
        if (!first) out->push_back(',');
        first = false;
        AppendQuoted(k, out);
        out->push_back(':');
        AppendCanonical(v, out);
      }
      out->push_back('}');
      return;
    }
    case element_type::ARRAY: {
      out->push_back('[');
      bool first = true;
      for (element v : simdjson::dom::array(e)) {
        if (!first) out->push_back(',');
        first = false;
        AppendCanonical(v, out);
      }
      out->push_back(']');
      return;
    }
    case element_type::STRING:
      AppendQuoted(std::string_view(e), out);
      return;
    case element_type::INT64:
      *out += std::to_string(int64_t(e));
      return;
    case element_type::UINT64:
      *out += std::to_string(uint64_t(e));
      return;
    case element_type::DOUBLE:
      AppendDouble(double(e), out);
      return;
    case element_type::BOOL:
      *out += bool(e) ? "true" : "false";
      return;
    case element_type::NULL_VALUE:
      *out += "null";
      return;
  }
}

std::string Canonical(const element& e) {
  std::string s;
  AppendCanonical(e, &s);
  return s;
}

// ---------------------------------------------------------------- lexical building blocks

// A code-point-level expression turned into the JSON string body that spells it.
ExprP JsonEncode(const ExprP& e) {
  switch (e->kind) {
    case Expr::Kind::kCodepoints: {
      std::vector<ExprP> alts;
      Ranges raw;
      for (const auto& [lo, hi] : e->ranges) {
        if (hi < 0x20) continue;
        raw.emplace_back(std::max<uint32_t>(lo, 0x20), hi);
      }
      raw = Normalize(raw);
      Ranges keep;
      for (const auto& [lo, hi] : raw) {  // minus '"' and '\'
        uint32_t a = lo;
        for (uint32_t x : {uint32_t{'"'}, uint32_t{'\\'}}) {
          if (x >= a && x <= hi) {
            if (x > a) keep.emplace_back(a, x - 1);
            a = x + 1;
          }
        }
        if (a <= hi) keep.emplace_back(a, hi);
      }
      alts.push_back(Codepoints(keep));
      auto has = [&](uint32_t c) {
        for (const auto& [lo, hi] : e->ranges) {
          if (c >= lo && c <= hi) return true;
        }
        return false;
      };
      if (has('"')) alts.push_back(Literal("\\\""));
      if (has('\\')) alts.push_back(Literal("\\\\"));
      if (has('/')) alts.push_back(Literal("\\/"));
      for (uint32_t hi = 0; hi < 2; ++hi) {  // \u00XX, grouped by the high hex digit
        Ranges lows;
        for (uint32_t lo = 0; lo < 16; ++lo) {
          const uint32_t c = hi * 16 + lo;
          if (!has(c)) continue;
          if (lo < 10) {
            lows.emplace_back('0' + lo, '0' + lo);
          } else {
            lows.emplace_back('a' + lo - 10, 'a' + lo - 10);
            lows.emplace_back('A' + lo - 10, 'A' + lo - 10);
          }
        }
        if (!lows.empty())
          alts.push_back(
              Concat({Literal("\\u00"), Byte(static_cast<uint8_t>('0' + hi)), Bytes(lows)}));
      }
      for (uint32_t c = 0; c < 0x20; ++c) {
        if (!has(c)) continue;
        const char* shorts = nullptr;
        switch (c) {
          case '\b':
            shorts = "\\b";
            break;
          case '\f':
            shorts = "\\f";
            break;
          case '\n':
            shorts = "\\n";
            break;
          case '\r':
            shorts = "\\r";
            break;
          case '\t':
            shorts = "\\t";
            break;
          default:
            break;
        }
        if (shorts) alts.push_back(Literal(shorts));
      }
      return Alt(std::move(alts));
    }
    case Expr::Kind::kEmpty:
    case Expr::Kind::kNothing:
    case Expr::Kind::kBytes:
      return e;
    default: {
      Expr copy = *e;
      for (ExprP& k : copy.kids) k = JsonEncode(k);
      return std::make_shared<const Expr>(std::move(copy));
    }
  }
}

ExprP StringChar() {
  static const ExprP e = JsonEncode(AnyCodepoint());
  return e;
}
ExprP Quote() {
  static const ExprP e = Byte('"');
  return e;
}
ExprP AnyString() {
  static const ExprP e = Concat({Quote(), Star(StringChar()), Quote()});
  return e;
}
ExprP Digit() { return Bytes({{'0', '9'}}); }
ExprP Digit19() { return Bytes({{'1', '9'}}); }
ExprP Natural() {  // 0 | [1-9][0-9]*
  return Alt({Byte('0'), Concat({Digit19(), Star(Digit())})});
}
ExprP AnyInteger() { return Concat({Optional(Byte('-')), Natural()}); }
ExprP Fraction() { return Concat({Byte('.'), Repeat(Digit(), 1, -1)}); }
ExprP Exponent() {
  return Concat({Bytes({{'e', 'e'}, {'E', 'E'}}), Optional(Bytes({{'+', '+'}, {'-', '-'}})),
                 Repeat(Digit(), 1, -1)});
}
ExprP AnyNumber() { return Concat({AnyInteger(), Optional(Fraction()), Optional(Exponent())}); }

// Canonical decimals (no leading zeros) of the integers in [lo, hi] (0 <= lo; hi < 0: no bound).
ExprP DigitsRange(const std::string& lo, const std::string& hi) {  // same length
  if (lo.empty()) return Empty();
  if (lo.find_first_not_of('0') == std::string::npos &&
      hi.find_first_not_of('9') == std::string::npos) {
    return Repeat(Digit(), static_cast<int>(lo.size()), static_cast<int>(lo.size()));
  }
  if (lo[0] == hi[0])
    return Concat({Byte(static_cast<uint8_t>(lo[0])), DigitsRange(lo.substr(1), hi.substr(1))});
  const size_t rest = lo.size() - 1;
  const std::string nines(rest, '9'), zeros(rest, '0');
  std::vector<ExprP> alts;
  alts.push_back(Concat({Byte(static_cast<uint8_t>(lo[0])), DigitsRange(lo.substr(1), nines)}));
  if (hi[0] - lo[0] > 1) {
    alts.push_back(
        Concat({Bytes({{static_cast<uint32_t>(lo[0] + 1), static_cast<uint32_t>(hi[0] - 1)}}),
                Repeat(Digit(), static_cast<int>(rest), static_cast<int>(rest))}));
  }
  alts.push_back(Concat({Byte(static_cast<uint8_t>(hi[0])), DigitsRange(zeros, hi.substr(1))}));
  return Alt(std::move(alts));
}

ExprP NaturalRange(int64_t lo, int64_t hi) {  // hi < 0: unbounded
  if (hi >= 0 && hi < lo) return Nothing();
  const std::string ls = std::to_string(lo);
  std::vector<ExprP> alts;
  const size_t max_len = hi >= 0 ? std::to_string(hi).size() : 19;
  for (size_t len = ls.size(); len <= max_len; ++len) {
    const std::string a = len == ls.size() ? ls : "1" + std::string(len - 1, '0');
    const std::string b = hi >= 0 && len == max_len ? std::to_string(hi) : std::string(len, '9');
    if (len == 1 && a == "0" && b != "0") {
      alts.push_back(Byte('0'));
      alts.push_back(DigitsRange("1", b));
    } else {
      alts.push_back(DigitsRange(a, b));
    }
  }
  if (hi < 0) {  // 20 digits and more
    alts.push_back(Concat({Digit19(), Repeat(Digit(), 19, -1)}));
  }
  return Alt(std::move(alts));
}

// Integers in the bounds (already integral, inclusive).
ExprP IntegerRange(std::optional<int64_t> lo, std::optional<int64_t> hi) {
  std::vector<ExprP> alts;
  // Non-negative part.
  if (!hi || *hi >= 0) {
    alts.push_back(NaturalRange(lo ? std::max<int64_t>(*lo, 0) : 0, hi ? *hi : -1));
  }
  // Negative part: -m with m in [max(1, -hi), -lo].
  if (!lo || *lo < 0) {
    const int64_t mlo = hi ? std::max<int64_t>(1, -*hi) : 1;
    const int64_t mhi = lo ? -*lo : -1;
    if (mhi < 0 || mhi >= mlo) alts.push_back(Concat({Byte('-'), NaturalRange(mlo, mhi)}));
  }
  return Alt(std::move(alts));
}

// Non-negative numbers y (no exponent) with integral bounds on y.
ExprP NonNegNumber(std::optional<int64_t> lo, bool lo_excl, std::optional<int64_t> hi,
                   bool hi_excl) {
  const ExprP any_frac = Optional(Fraction());
  const ExprP pos_frac = Concat({Byte('.'), Star(Digit()), Digit19(), Star(Digit())});
  const ExprP zero_frac = Optional(Concat({Byte('.'), Repeat(Byte('0'), 1, -1)}));
  std::vector<ExprP> alts;
  int64_t any_lo = 0;
  if (lo && *lo >= 0) any_lo = lo_excl ? *lo + 1 : *lo;
  std::optional<int64_t> any_hi;
  if (hi) any_hi = *hi - 1;
  if (!any_hi || *any_hi >= any_lo) {
    alts.push_back(Concat({NaturalRange(any_lo, any_hi ? *any_hi : -1), any_frac}));
  }
  if (lo && *lo >= 0 && lo_excl && (!hi || *lo < *hi)) {
    alts.push_back(Concat({NaturalRange(*lo, *lo), pos_frac}));
  }
  if (hi && *hi >= 0 && !hi_excl && (!lo || *hi > *lo || (*hi == *lo && !lo_excl))) {
    alts.push_back(Concat({NaturalRange(*hi, *hi), zero_frac}));
  }
  return Alt(std::move(alts));
}

ExprP BoundedNumber(const Bound& lo, const Bound& hi) {
  std::optional<int64_t> l, h;
  if (lo.set) l = static_cast<int64_t>(lo.v);
  if (hi.set) h = static_cast<int64_t>(hi.v);
  std::vector<ExprP> alts;
  // x >= 0: y = x with the bounds as they are (a lower bound below 0 is no bound).
  if (!h || *h > 0 || (*h == 0 && !hi.excl)) {
    std::optional<int64_t> yl = l;
    bool yl_excl = lo.excl;
    if (yl && *yl < 0) {
      yl.reset();
      yl_excl = false;
    }
    alts.push_back(NonNegNumber(yl, yl_excl, h, hi.excl));
  }
  // x <= 0: x = -y, y in [-hi, -lo].
  if (!l || *l < 0 || (*l == 0 && !lo.excl)) {
    std::optional<int64_t> yl, yh;
    bool yl_excl = false;
    if (h) {
      yl = -*h;
      yl_excl = hi.excl;
      if (*yl < 0) {
        yl.reset();
        yl_excl = false;
      }
    }
    if (l) yh = -*l;
    alts.push_back(Concat({Byte('-'), NonNegNumber(yl, yl_excl, yh, lo.excl)}));
  }
  return Alt(std::move(alts));
}

// A JSON string that is none of `names` (canonical spellings; escapes of other characters
// are free, `\/` and `\u00XX` are not used in these keys).
ExprP StringExcluding(const std::vector<std::string>& names) {
  if (names.empty()) return AnyString();
  // A trie over the names' code points.
  struct Node {
    std::map<uint32_t, int> kids;
    bool terminal = false;
  };
  std::vector<Node> trie(1);
  for (const std::string& n : names) {
    int cur = 0;
    for (size_t i = 0; i < n.size();) {
      const auto c = static_cast<uint8_t>(n[i]);
      const int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : 4;
      uint32_t cp = len == 1 ? c : c & (0x7F >> len);
      for (int k = 1; k < len && i + static_cast<size_t>(k) < n.size(); ++k) {
        cp = (cp << 6) | (static_cast<uint8_t>(n[i + static_cast<size_t>(k)]) & 0x3F);
      }
      i += static_cast<size_t>(len);
      auto it = trie[static_cast<size_t>(cur)].kids.find(cp);
      if (it == trie[static_cast<size_t>(cur)].kids.end()) {
        trie.emplace_back();
        const int id = static_cast<int>(trie.size() - 1);
        trie[static_cast<size_t>(cur)].kids[cp] = id;
        cur = id;
      } else {
        cur = it->second;
      }
    }
    trie[static_cast<size_t>(cur)].terminal = true;
  }
  // One element per code point: raw, or its short escape. `\/` and `\u00XX` are left out of
  // keys near a name, so that every spelling of a name is caught.
  auto elem = [](const Ranges& r) {
    ExprP enc = JsonEncode(Codepoints(r));
    return enc;
  };
  const ExprP free_tail = Concat({Star(StringChar()), Quote()});
  // A key is a path down the trie, then either a code point off it and any tail (`dev`), or the
  // closing quote at a node that is not a name (`close`). The tail appears once, after every
  // way off the trie, so that all keys off the trie share its states (a mask walk finds the
  // same state whichever name a token's bytes left).
  auto edge = [](uint32_t cp) {
    std::string utf8;
    AppendUtf8(cp, &utf8);
    std::string q;
    AppendQuoted(utf8, &q);  // the canonical spelling: raw or its short escape
    return Literal(q.substr(1, q.size() - 2));
  };
  std::function<ExprP(int)> dev = [&](int node) -> ExprP {
    const Node& nd = trie[static_cast<size_t>(node)];
    std::vector<ExprP> alts;
    Ranges taken;
    for (const auto& [cp, kid] : nd.kids) {
      taken.emplace_back(cp, cp);
      alts.push_back(Concat({edge(cp), dev(kid)}));
    }
    // Control characters, '"', '\' and '/' spelled other ways would escape the trie:
    // such keys are not generated near a name (documented).
    const Ranges others = Complement(taken, 0x10FFFF);
    if (!others.empty()) alts.push_back(elem(others));
    return alts.empty() ? Nothing() : Alt(std::move(alts));
  };
  std::function<ExprP(int)> close = [&](int node) -> ExprP {
    const Node& nd = trie[static_cast<size_t>(node)];
    std::vector<ExprP> alts;
    for (const auto& [cp, kid] : nd.kids) {
      if (ExprP k = close(kid)) alts.push_back(Concat({edge(cp), std::move(k)}));
    }
    if (!nd.terminal) alts.push_back(Quote());
    if (alts.empty()) return nullptr;  // every key through here is a name
    return alts.size() == 1 ? alts[0] : Alt(std::move(alts));
  };
  std::vector<ExprP> ways = {Concat({dev(0), free_tail})};
  if (ExprP c = close(0)) ways.push_back(std::move(c));
  return Concat({Quote(), ways.size() == 1 ? ways[0] : Alt(std::move(ways))});
}

}  // namespace sluice::structured::json_text
