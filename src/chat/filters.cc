// jinja2's built-in filters and tests (the subset chat templates use), plus transformers'
// tojson. Signatures and edge cases follow jinja2 3.1.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "chat/builtins.h"

namespace sluice::chat {
namespace {

Status Bad(const std::string& msg) { return InvalidArgument(msg); }

// Attribute lookup by a dotted path ("a.b", "0"), as jinja2's make_attrgetter.
StatusOr<Value> AttrPath(const Value& v, const std::string& path) {
  Value cur = v;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    Value key = Value::Str(part);
    if (!part.empty() && std::all_of(part.begin(), part.end(), ::isdigit))
      key = Value::Int(std::atoll(part.c_str()));
    ASSIGN_OR_RETURN(cur, GetItem(cur, key));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

Value SortKey(const Value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value::Str(ToLower(v.s));
  return v;
}

StatusOr<std::vector<Value>> SortValues(std::vector<Value> items,
                                        const std::function<StatusOr<Value>(const Value&)>& key,
                                        bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& x : items) {
    ASSIGN_OR_RETURN(Value k, key(x));
    keyed.emplace_back(std::move(k), std::move(x));
  }
  Status err;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    auto c = Compare(a.first, b.first);
    if (!c.ok()) {
      err = c.status();
      return false;
    }
    return reverse ? *c > 0 : *c < 0;
  });
  RETURN_IF_ERROR(err);
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return out;
}

StatusOr<Value> ToInt(const Value& v, const Value& def, int base) {
  if (v.is_int()) return Value::Int(v.AsInt());
  if (v.kind == Value::Kind::kFloat) {
    if (std::isfinite(v.f) && std::fabs(v.f) < 9.2e18) return Value::Int(static_cast<int64_t>(v.f));
    return def;
  }
  if (v.is_string()) {
    std::string s;
    for (char c : v.s) {
      if (c != '_') s += c;
    }
    const size_t b = s.find_first_not_of(" \t\n\r\v\f");
    const size_t e = s.find_last_not_of(" \t\n\r\v\f");
    if (b != std::string::npos) {
      s = s.substr(b, e - b + 1);
      char* end = nullptr;
      errno = 0;
      const long long x = std::strtoll(s.c_str(), &end, base);
      if (end && *end == 0 && errno == 0 && !s.empty()) return Value::Int(x);
      errno = 0;
      const double d = std::strtod(s.c_str(), &end);
      if (end && *end == 0 && errno == 0 && std::isfinite(d) && std::fabs(d) < 9.2e18)
        return Value::Int(static_cast<int64_t>(d));
    }
  }
  return def;
}

StatusOr<Value> ToFloat(const Value& v, const Value& def) {
  if (v.is_number()) return Value::Float(v.AsDouble());
  if (v.is_string()) {
    const size_t b = v.s.find_first_not_of(" \t\n\r\v\f");
    if (b != std::string::npos) {
      const std::string s = v.s.substr(b, v.s.find_last_not_of(" \t\n\r\v\f") - b + 1);
      char* end = nullptr;
      const double d = std::strtod(s.c_str(), &end);
      if (end && *end == 0) return Value::Float(d);
    }
  }
  return def;
}

double PyRound(double x, int64_t ndigits) {
  if (!std::isfinite(x)) return x;
  if (ndigits == 0) return std::nearbyint(x);
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(std::clamp<int64_t>(ndigits, 0, 300)),
                x);
  if (ndigits < 0) {
    const double p = std::pow(10.0, static_cast<double>(-ndigits));
    return std::nearbyint(x / p) * p;
  }
  return std::strtod(buf, nullptr);
}

std::string Indent(std::string s, const Value& width, bool first, bool blank) {
  const std::string ind =
      width.is_string()
          ? width.s
          : std::string(std::max<int64_t>(0, width.is_int() ? width.AsInt() : 4), ' ');
  s += "\n";
  std::vector<std::string> lines;
  std::string cur;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(cur);
      cur.clear();
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    } else {
      cur += s[i];
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  std::string rv;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i) rv += (i ? "\n" + ind : "") + lines[i];
  } else {
    rv = lines.empty() ? "" : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) rv += "\n" + (lines[i].empty() ? "" : ind) + lines[i];
  }
  if (first) rv = ind + rv;
  return rv;
}

std::string JinjaTitle(const std::string& s) {
  // jinja2: re.split(r"([-\s({\[<]+)") then item[0].upper() + item[1:].lower()
  std::u32string u = Utf8Decode(s);
  bool start = true;
  for (auto& c : u) {
    const bool sep = c == '-' || c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
                     c == '\f' || c == '(' || c == '{' || c == '[' || c == '<';
    if (sep) {
      start = true;
      continue;
    }
    const std::string one = Utf8Encode(std::u32string(1, c));
    const std::u32string conv = Utf8Decode(start ? ToUpper(one) : ToLower(one));
    if (conv.size() == 1) c = conv[0];
    start = false;
  }
  return Utf8Encode(u);
}

StatusOr<Value> SelectImpl(const Value& in, CallArgs& args, bool attr, bool keep) {
  ASSIGN_OR_RETURN(auto items, Iterate(in));
  size_t off = 0;
  std::string attribute;
  if (attr) {
    Value a = args.Get(0, "attribute");
    if (!a.is_string()) return Bad("selectattr needs an attribute name");
    attribute = a.s;
    off = 1;
  }
  std::string test;
  CallArgs targs;
  if (args.pos.size() > off) {
    if (!args.pos[off].is_string()) return Bad("test name must be a string");
    test = args.pos[off].s;
    targs.pos.assign(args.pos.begin() + off + 1, args.pos.end());
  }
  std::vector<Value> out;
  for (const auto& x : items) {
    Value v = x;
    if (attr) {
      ASSIGN_OR_RETURN(v, AttrPath(x, attribute));
    }
    bool r;
    if (test.empty()) {
      r = Truthy(v);
    } else {
      CallArgs copy = targs;
      ASSIGN_OR_RETURN(r, CallTest(test, v, copy));
    }
    if (r == keep) out.push_back(x);
  }
  return Value::NewList(std::move(out));
}

}  // namespace

StatusOr<Value> CallFilter(const std::string& name, const Value& in, CallArgs& args,
                           const RenderOptions& opts) {
  const std::string& f = name;
  if (f == "tojson") {
    // transformers: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)
    JsonOptions o;
    Value ea = args.Get(0, "ensure_ascii"), ind = args.Get(1, "indent"),
          sep = args.Get(2, "separators"), sk = args.Get(3, "sort_keys");
    if (ind.is_int()) o.indent = static_cast<int>(std::clamp<int64_t>(ind.AsInt(), -1, 64));
    if (ind.is_int() && ind.AsInt() < 0) o.indent = 0;
    if (ind.is_string()) o.indent_str = ind.s, o.indent = 0;
    if (sep.is_list() && sep.list->items.size() == 2 && sep.list->items[0].is_string() &&
        sep.list->items[1].is_string()) {
      o.has_separators = true;
      o.item_sep = sep.list->items[0].s;
      o.key_sep = sep.list->items[1].s;
    }
    o.sort_keys = Truthy(sk);
    ASSIGN_OR_RETURN(std::string js, ToJson(in, o));
    if (Truthy(ea)) {
      std::string esc;
      for (char32_t c : Utf8Decode(js)) {
        if (c < 0x80) {
          esc += static_cast<char>(c);
          continue;
        }
        char b[16];
        if (c >= 0x10000) {
          const char32_t v = c - 0x10000;
          std::snprintf(b, sizeof(b), "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
        } else {
          std::snprintf(b, sizeof(b), "\\u%04x", static_cast<unsigned>(c));
        }
        esc += b;
      }
      js = esc;
    }
    return Value::Str(std::move(js));
  }
  if (f == "default" || f == "d") {
    bool present;
    Value def = args.Get(0, "default_value", &present);
    if (!present) def = Value::Str("");
    const bool boolean = Truthy(args.Get(1, "boolean"));
    if (in.is_undefined() || (boolean && !Truthy(in))) return def;
    return in;
  }
  if (f == "length" || f == "count") {
    if (in.is_string()) return Value::Int(static_cast<int64_t>(Utf8Length(in.s)));
    if (in.is_list()) return Value::Int(static_cast<int64_t>(in.list->items.size()));
    if (in.is_dict() || in.kind == Value::Kind::kNamespace)
      return Value::Int(static_cast<int64_t>(in.dict->items.size()));
    if (in.is_undefined()) return Value::Int(0);
    return Bad("object of type '" + TypeName(in) + "' has no len()");
  }
  if (f == "string") return Value::Str(PyStr(in));
  if (f == "safe") return in.is_string() ? in : Value::Str(PyStr(in));
  if (f == "trim") {
    Value chars = args.Get(0, "chars");
    ASSIGN_OR_RETURN(Value m, GetAttr(Value::Str(PyStr(in)), "strip"));
    CallArgs a;
    if (!chars.is_undefined()) a.pos.push_back(chars);
    return m.fn->fn(a);
  }
  if (f == "upper") return Value::Str(ToUpper(PyStr(in)));
  if (f == "lower") return Value::Str(ToLower(PyStr(in)));
  if (f == "title") return Value::Str(JinjaTitle(PyStr(in)));
  if (f == "capitalize") {
    ASSIGN_OR_RETURN(Value m, GetAttr(Value::Str(PyStr(in)), "capitalize"));
    CallArgs a;
    return m.fn->fn(a);
  }
  if (f == "replace") {
    if (in.is_undefined()) return UndefinedError(in);
    ASSIGN_OR_RETURN(Value m, GetAttr(Value::Str(PyStr(in)), "replace"));
    CallArgs a;
    a.pos = {Value::Str(PyStr(args.Get(0, "old"))), Value::Str(PyStr(args.Get(1, "new")))};
    Value c = args.Get(2, "count");
    if (c.is_int()) a.pos.push_back(c);
    return m.fn->fn(a);
  }
  if (f == "indent") {
    bool present;
    Value w = args.Get(0, "width", &present);
    if (!present) w = Value::Int(4);
    return Value::Str(
        Indent(PyStr(in), w, Truthy(args.Get(1, "first")), Truthy(args.Get(2, "blank"))));
  }
  if (f == "int") {
    bool present;
    Value def = args.Get(0, "default", &present);
    if (!present) def = Value::Int(0);
    Value base = args.Get(1, "base");
    return ToInt(in, def, base.is_int() ? static_cast<int>(base.AsInt()) : 10);
  }
  if (f == "float") {
    bool present;
    Value def = args.Get(0, "default", &present);
    if (!present) def = Value::Float(0.0);
    return ToFloat(in, def);
  }
  if (f == "abs") {
    if (in.kind == Value::Kind::kFloat) return Value::Float(std::fabs(in.f));
    if (in.is_int()) {
      if (in.AsInt() == INT64_MIN) return OutOfRange("integer overflow");
      return Value::Int(std::llabs(in.AsInt()));
    }
    return Bad("bad operand type for abs(): '" + TypeName(in) + "'");
  }
  if (f == "round") {
    Value p = args.Get(0, "precision"), m = args.Get(1, "method");
    const int64_t prec = p.is_int() ? p.AsInt() : 0;
    const std::string method = m.is_string() ? m.s : "common";
    if (method != "common" && method != "ceil" && method != "floor")
      return Bad("method must be common, ceil or floor");
    if (!in.is_number()) {
      if (in.is_undefined()) return UndefinedError(in);
      return Bad("type " + TypeName(in) + " doesn't define __round__ method");
    }
    if (method == "common") {
      if (in.is_int()) return Value::Int(in.AsInt());
      return Value::Float(PyRound(in.f, prec));
    }
    const double sc = std::pow(10.0, static_cast<double>(prec));
    const double x = in.AsDouble() * sc;
    return Value::Float((method == "ceil" ? std::ceil(x) : std::floor(x)) / sc);
  }
  if (f == "first") {
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    if (items.empty()) return Value::Undefined("No first item, sequence was empty.");
    return items[0];
  }
  if (f == "last") {
    if (in.is_undefined()) return Value::Undefined("No last item, sequence was empty.");
    if (!(in.is_list() || in.is_string() || in.is_dict()))
      return Bad("'" + TypeName(in) + "' object is not reversible");
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    if (items.empty()) return Value::Undefined("No last item, sequence was empty.");
    return items.back();
  }
  if (f == "list") {
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    return Value::NewList(std::move(items));
  }
  if (f == "reverse") {
    if (in.is_string()) {
      std::u32string u = Utf8Decode(in.s);
      std::reverse(u.begin(), u.end());
      return Value::Str(Utf8Encode(u));
    }
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    std::reverse(items.begin(), items.end());
    return Value::NewList(std::move(items));
  }
  if (f == "join") {
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    Value sep = args.Get(0, "d"), attr = args.Get(1, "attribute");
    std::string out;
    for (size_t i = 0; i < items.size(); ++i) {
      Value v = items[i];
      if (attr.is_string() || attr.is_int()) {
        ASSIGN_OR_RETURN(v, AttrPath(v, PyStr(attr)));
      }
      if (i) out += PyStr(sep);
      out += PyStr(v);
      if (out.size() > opts.max_output_bytes)
        return OutOfRange("join result exceeds max_output_bytes");
    }
    return Value::Str(std::move(out));
  }
  if (f == "map") {
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    std::vector<Value> out;
    bool has_attr;
    Value attr = args.Get(99, "attribute", &has_attr);
    if (has_attr) {
      bool has_def;
      Value def = args.Get(99, "default", &has_def);
      for (const auto& x : items) {
        ASSIGN_OR_RETURN(Value v, AttrPath(x, PyStr(attr)));
        if (v.is_undefined() && has_def) v = def;
        out.push_back(v);
      }
    } else {
      if (args.pos.empty() || !args.pos[0].is_string())
        return Bad("map requires a filter argument");
      const std::string fname = args.pos[0].s;
      for (const auto& x : items) {
        CallArgs rest;
        rest.pos.assign(args.pos.begin() + 1, args.pos.end());
        rest.kw = args.kw;
        ASSIGN_OR_RETURN(Value v, CallFilter(fname, x, rest, opts));
        out.push_back(v);
      }
    }
    return Value::NewList(std::move(out));
  }
  if (f == "select") return SelectImpl(in, args, false, true);
  if (f == "reject") return SelectImpl(in, args, false, false);
  if (f == "selectattr") return SelectImpl(in, args, true, true);
  if (f == "rejectattr") return SelectImpl(in, args, true, false);
  if (f == "items") {
    if (in.is_undefined()) return Value::NewList();
    if (!in.is_dict()) return Bad("Can only get item pairs from a mapping.");
    std::vector<Value> out;
    for (const auto& [k, v] : in.dict->items) out.push_back(Value::NewList({k, v}, true));
    return Value::NewList(std::move(out));
  }
  if (f == "dictsort") {
    if (!in.is_dict()) return Bad("dictsort: expected a mapping");
    const bool cs = Truthy(args.Get(0, "case_sensitive"));
    Value by = args.Get(1, "by");
    const bool by_value = by.is_string() && by.s == "value";
    if (by.is_string() && by.s != "key" && by.s != "value")
      return Bad("You can only sort by either \"key\" or \"value\"");
    std::vector<Value> pairs;
    for (const auto& [k, v] : in.dict->items) pairs.push_back(Value::NewList({k, v}, true));
    ASSIGN_OR_RETURN(auto sorted, SortValues(
                                      pairs,
                                      [&](const Value& p) -> StatusOr<Value> {
                                        return SortKey(p.list->items[by_value ? 1 : 0], cs);
                                      },
                                      Truthy(args.Get(2, "reverse"))));
    return Value::NewList(std::move(sorted));
  }
  if (f == "sort") {
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    const bool rev = Truthy(args.Get(0, "reverse")), cs = Truthy(args.Get(1, "case_sensitive"));
    Value attr = args.Get(2, "attribute");
    ASSIGN_OR_RETURN(auto sorted, SortValues(
                                      items,
                                      [&](const Value& x) -> StatusOr<Value> {
                                        Value v = x;
                                        if (!attr.is_undefined() && !attr.is_none()) {
                                          ASSIGN_OR_RETURN(v, AttrPath(x, PyStr(attr)));
                                        }
                                        return SortKey(v, cs);
                                      },
                                      rev));
    return Value::NewList(std::move(sorted));
  }
  if (f == "unique") {
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    const bool cs = Truthy(args.Get(0, "case_sensitive"));
    Value attr = args.Get(1, "attribute");
    std::vector<Value> seen, out;
    for (const auto& x : items) {
      Value k = x;
      if (!attr.is_undefined() && !attr.is_none()) {
        ASSIGN_OR_RETURN(k, AttrPath(x, PyStr(attr)));
      }
      k = SortKey(k, cs);
      bool dup = false;
      for (const auto& s : seen) dup = dup || Equal(s, k);
      if (!dup) {
        seen.push_back(k);
        out.push_back(x);
      }
    }
    return Value::NewList(std::move(out));
  }
  if (f == "min" || f == "max") {
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    if (items.empty()) return Value::Undefined("No aggregated item, sequence was empty.");
    const bool cs = Truthy(args.Get(0, "case_sensitive"));
    Value attr = args.Get(1, "attribute");
    Value best = items[0];
    for (size_t i = 1; i < items.size(); ++i) {
      Value a = items[i], b = best;
      if (!attr.is_undefined() && !attr.is_none()) {
        ASSIGN_OR_RETURN(a, AttrPath(a, PyStr(attr)));
        ASSIGN_OR_RETURN(b, AttrPath(b, PyStr(attr)));
      }
      ASSIGN_OR_RETURN(int c, Compare(SortKey(a, cs), SortKey(b, cs)));
      if (f == "min" ? c < 0 : c > 0) best = items[i];
    }
    return best;
  }
  if (f == "sum") {
    ASSIGN_OR_RETURN(auto items, Iterate(in));
    Value attr = args.Get(0, "attribute");
    bool present;
    Value acc = args.Get(1, "start", &present);
    if (!present) acc = Value::Int(0);
    for (const auto& x : items) {
      Value v = x;
      if (!attr.is_undefined() && !attr.is_none()) {
        ASSIGN_OR_RETURN(v, AttrPath(x, PyStr(attr)));
      }
      ASSIGN_OR_RETURN(acc, BinaryOp("+", acc, v, opts));
    }
    return acc;
  }
  if (f == "attr") {
    ASSIGN_OR_RETURN(Value v, GetAttr(in, PyStr(args.Get(0, "name"))));
    return v;
  }
  if (f == "e" || f == "escape") {
    std::string out;
    for (char c : PyStr(in)) {
      switch (c) {
        case '&':
          out += "&amp;";
          break;
        case '<':
          out += "&lt;";
          break;
        case '>':
          out += "&gt;";
          break;
        case '"':
          out += "&#34;";
          break;
        case '\'':
          out += "&#39;";
          break;
        default:
          out += c;
      }
    }
    return Value::Str(std::move(out));
  }
  if (f == "wordcount") {
    ASSIGN_OR_RETURN(Value m, GetAttr(Value::Str(PyStr(in)), "split"));
    CallArgs a;
    ASSIGN_OR_RETURN(Value parts, m.fn->fn(a));
    return Value::Int(static_cast<int64_t>(parts.list->items.size()));
  }
  return Bad("No filter named '" + f + "'.");
}

StatusOr<bool> CallTest(const std::string& t, const Value& v, CallArgs& args) {
  const Value a = args.Get(0, "other");
  if (t == "defined") return !v.is_undefined();
  if (t == "undefined") return v.is_undefined();
  if (t == "none") return v.is_none();
  if (t == "string") return v.is_string();
  if (t == "mapping") return v.is_dict();
  if (t == "sequence") return v.is_string() || v.is_list() || v.is_dict();
  if (t == "iterable") return v.is_string() || v.is_list() || v.is_dict() || v.is_undefined();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.kind == Value::Kind::kInt;
  if (t == "float") return v.kind == Value::Kind::kFloat;
  if (t == "boolean") return v.kind == Value::Kind::kBool;
  if (t == "true") return v.kind == Value::Kind::kBool && v.b;
  if (t == "false") return v.kind == Value::Kind::kBool && !v.b;
  if (t == "callable") return v.kind == Value::Kind::kCallable;
  if (t == "equalto" || t == "eq" || t == "==" || t == "sameas") return Equal(v, a);
  if (t == "ne" || t == "!=") return !Equal(v, a);
  if (t == "lt" || t == "lessthan" || t == "le" || t == "gt" || t == "greaterthan" || t == "ge") {
    if (v.is_undefined()) return UndefinedError(v);
    if (a.is_undefined()) return UndefinedError(a);
    ASSIGN_OR_RETURN(int c, Compare(v, a));
    if (t == "lt" || t == "lessthan") return c < 0;
    if (t == "le") return c <= 0;
    if (t == "gt" || t == "greaterthan") return c > 0;
    return c >= 0;
  }
  if (t == "odd" || t == "even" || t == "divisibleby") {
    if (v.is_undefined()) return UndefinedError(v);
    if (t == "divisibleby") {
      ASSIGN_OR_RETURN(Value r, BinaryOp("%", v, args.Get(0, "num"), RenderOptions{}));
      return !Truthy(r);
    }
    ASSIGN_OR_RETURN(Value r, BinaryOp("%", v, Value::Int(2), RenderOptions{}));
    return (t == "odd") == Truthy(r);
  }
  if (t == "lower" || t == "upper") {
    const std::string s = PyStr(v);
    const std::string same = t == "lower" ? ToLower(s) : ToUpper(s);
    const std::string other = t == "lower" ? ToUpper(s) : ToLower(s);
    return same == s && other != s;
  }
  if (t == "in") {
    ASSIGN_OR_RETURN(bool r, Contains(args.Get(0, "seq"), v));
    return r;
  }
  return InvalidArgument("No test named '" + t + "'.");
}

}  // namespace sluice::chat
