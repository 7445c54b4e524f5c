// Python semantics of operators, item/attribute access, slicing and the str/dict/list methods
// jinja2's ImmutableSandboxedEnvironment lets templates call.
#include <utf8proc.h>

#include <cmath>
#include <limits>
#include <optional>

#include "chat/builtins.h"

namespace sluice::chat {
namespace {

bool IsPySpace(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f) || c == 0x85 ||
         c == 0xa0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
         c == 0x202f || c == 0x205f || c == 0x3000;
}

Status TypeErr(const std::string& msg) { return InvalidArgument(msg); }

std::string Strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::u32string u = Utf8Decode(s);
  std::u32string set;
  const bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) set = Utf8Decode(chars.s);
  auto strip = [&](char32_t c) { return ws ? IsPySpace(c) : set.find(c) != std::u32string::npos; };
  size_t b = 0, e = u.size();
  if (left) {
    while (b < e && strip(u[b])) ++b;
  }
  if (right) {
    while (e > b && strip(u[e - 1])) --e;
  }
  return Utf8Encode(std::u32string_view(u).substr(b, e - b));
}

StatusOr<Value> Split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<Value> parts;
  if (sep.is_none() || sep.is_undefined()) {
    const std::u32string u = Utf8Decode(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < u.size()) {
      while (i < u.size() && IsPySpace(u[i])) ++i;
      if (i >= u.size()) break;
      size_t j = i;
      while (j < u.size() && !IsPySpace(u[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words)
        parts.push_back(Value::Str(Utf8Encode(std::u32string_view(u).substr(b, e - b))));
    } else if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k)
        parts.push_back(Value::Str(Utf8Encode(
            std::u32string_view(u).substr(words[k].first, words[k].second - words[k].first))));
      size_t e = u.size();
      while (e > 0 && IsPySpace(u[e - 1])) --e;
      parts.push_back(Value::Str(Utf8Encode(
          std::u32string_view(u).substr(words[maxsplit].first, e - words[maxsplit].first))));
    } else {
      const size_t keep = words.size() - maxsplit;
      size_t b = 0;
      while (b < u.size() && IsPySpace(u[b])) ++b;
      parts.push_back(
          Value::Str(Utf8Encode(std::u32string_view(u).substr(b, words[keep - 1].second - b))));
      for (size_t k = keep; k < words.size(); ++k)
        parts.push_back(Value::Str(Utf8Encode(
            std::u32string_view(u).substr(words[k].first, words[k].second - words[k].first))));
    }
    return Value::NewList(std::move(parts));
  }
  if (!sep.is_string()) return TypeErr("must be str or None, not " + TypeName(sep));
  if (sep.s.empty()) return TypeErr("empty separator");
  std::vector<std::string> pieces;
  size_t start = 0;
  while (true) {
    const size_t at = s.find(sep.s, start);
    if (at == std::string::npos) break;
    pieces.push_back(s.substr(start, at - start));
    start = at + sep.s.size();
  }
  pieces.push_back(s.substr(start));
  if (maxsplit >= 0 && static_cast<size_t>(maxsplit) + 1 < pieces.size()) {
    std::vector<std::string> merged;
    if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k) merged.push_back(pieces[k]);
      std::string rest = pieces[maxsplit];
      for (size_t k = maxsplit + 1; k < pieces.size(); ++k) rest += sep.s + pieces[k];
      merged.push_back(rest);
    } else {
      const size_t keep = pieces.size() - maxsplit;
      std::string rest = pieces[0];
      for (size_t k = 1; k < keep; ++k) rest += sep.s + pieces[k];
      merged.push_back(rest);
      for (size_t k = keep; k < pieces.size(); ++k) merged.push_back(pieces[k]);
    }
    pieces = std::move(merged);
  }
  for (auto& p : pieces) parts.push_back(Value::Str(std::move(p)));
  return Value::NewList(std::move(parts));
}

std::string Capitalize(const std::string& s) {
  std::u32string u = Utf8Decode(s);
  for (size_t i = 0; i < u.size(); ++i)
    u[i] = i == 0 ? utf8proc_totitle(u[i]) : utf8proc_tolower(u[i]);
  return Utf8Encode(u);
}

std::string PyTitle(const std::string& s) {
  std::u32string u = Utf8Decode(s);
  bool prev_cased = false;
  for (auto& c : u) {
    const auto cat = utf8proc_category(c);
    const bool cased =
        cat == UTF8PROC_CATEGORY_LU || cat == UTF8PROC_CATEGORY_LL || cat == UTF8PROC_CATEGORY_LT;
    if (cased) {
      c = prev_cased ? utf8proc_tolower(c) : utf8proc_totitle(c);
      prev_cased = true;
    } else {
      prev_cased = false;
    }
  }
  return Utf8Encode(u);
}

std::string Replace(const std::string& s, const std::string& old, const std::string& rep,
                    int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::u32string u = Utf8Decode(s);
    int64_t n = 0;
    for (char32_t c : u) {
      if (count < 0 || n < count) {
        out += rep;
        ++n;
      }
      out += Utf8Encode(std::u32string(1, c));
    }
    if (count < 0 || n < count) out += rep;
    return out;
  }
  size_t start = 0;
  int64_t n = 0;
  while (count < 0 || n < count) {
    const size_t at = s.find(old, start);
    if (at == std::string::npos) break;
    out += s.substr(start, at - start) + rep;
    start = at + old.size();
    ++n;
  }
  return out + s.substr(start);
}

int64_t CpIndex(const std::string& s, size_t byte_pos) {
  return static_cast<int64_t>(Utf8Length(std::string_view(s).substr(0, byte_pos)));
}

Value Unsafe(const Value& obj, const std::string& name) {
  const std::string msg =
      "access to attribute '" + name + "' of '" + TypeName(obj) + "' object is unsafe.";
  return Value::Func(name, [msg](CallArgs&) -> StatusOr<Value> { return InvalidArgument(msg); });
}

std::optional<Value> StrMethod(const Value& obj, const std::string& name) {
  const std::string s = obj.s;
  auto str_arg = [](CallArgs& a, size_t i, const char* n) -> StatusOr<std::string> {
    Value v = a.Get(i, n);
    if (!v.is_string())
      return TypeErr(std::string("expected a string argument for ") + n + ", got " + TypeName(v));
    return v.s;
  };
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return Value::Func(name, [s, starts](CallArgs& a) -> StatusOr<Value> {
      Value p = a.Get(0, "prefix");
      std::vector<Value> cands =
          p.is_list() && p.list->tuple ? p.list->items : std::vector<Value>{p};
      for (const auto& c : cands) {
        if (!c.is_string())
          return TypeErr("startswith first arg must be str or a tuple of str, not " + TypeName(c));
        if (starts
                ? s.compare(0, c.s.size(), c.s) == 0 && s.size() >= c.s.size()
                : s.size() >= c.s.size() && s.compare(s.size() - c.s.size(), c.s.size(), c.s) == 0)
          return Value::Bool(true);
      }
      return Value::Bool(false);
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool l = name != "rstrip", r = name != "lstrip";
    return Value::Func(name, [s, l, r](CallArgs& a) -> StatusOr<Value> {
      Value chars = a.Get(0, "chars");
      if (!chars.is_undefined() && !chars.is_none() && !chars.is_string())
        return TypeErr("strip arg must be None or str");
      return Value::Str(Strip(s, chars, l, r));
    });
  }
  if (name == "split" || name == "rsplit") {
    const bool right = name == "rsplit";
    return Value::Func(name, [s, right](CallArgs& a) -> StatusOr<Value> {
      Value m = a.Get(1, "maxsplit");
      return Split(s, a.Get(0, "sep"), m.is_int() ? m.AsInt() : -1, right);
    });
  }
  if (name == "replace") {
    return Value::Func(name, [s, str_arg](CallArgs& a) -> StatusOr<Value> {
      ASSIGN_OR_RETURN(std::string o, str_arg(a, 0, "old"));
      ASSIGN_OR_RETURN(std::string n, str_arg(a, 1, "new"));
      Value c = a.Get(2, "count");
      return Value::Str(Replace(s, o, n, c.is_int() ? c.AsInt() : -1));
    });
  }
  if (name == "upper")
    return Value::Func(name, [s](CallArgs&) -> StatusOr<Value> { return Value::Str(ToUpper(s)); });
  if (name == "lower")
    return Value::Func(name, [s](CallArgs&) -> StatusOr<Value> { return Value::Str(ToLower(s)); });
  if (name == "title")
    return Value::Func(name, [s](CallArgs&) -> StatusOr<Value> { return Value::Str(PyTitle(s)); });
  if (name == "capitalize")
    return Value::Func(name,
                       [s](CallArgs&) -> StatusOr<Value> { return Value::Str(Capitalize(s)); });
  if (name == "find" || name == "rfind" || name == "index" || name == "count") {
    return Value::Func(name, [s, name, str_arg](CallArgs& a) -> StatusOr<Value> {
      ASSIGN_OR_RETURN(std::string sub, str_arg(a, 0, "sub"));
      if (name == "count") {
        if (sub.empty()) return Value::Int(static_cast<int64_t>(Utf8Length(s)) + 1);
        int64_t n = 0;
        for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size()))
          ++n;
        return Value::Int(n);
      }
      const size_t at = name == "rfind" ? s.rfind(sub) : s.find(sub);
      if (at == std::string::npos) {
        if (name == "index") return InvalidArgument("substring not found");
        return Value::Int(-1);
      }
      return Value::Int(CpIndex(s, at));
    });
  }
  if (name == "splitlines") {
    return Value::Func(name, [s](CallArgs&) -> StatusOr<Value> {
      std::vector<Value> out;
      std::string cur;
      for (size_t i = 0; i < s.size(); ++i) {
        if (s[i] == '\n' || s[i] == '\r') {
          out.push_back(Value::Str(cur));
          cur.clear();
          if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
        } else {
          cur += s[i];
        }
      }
      if (!cur.empty()) out.push_back(Value::Str(cur));
      return Value::NewList(std::move(out));
    });
  }
  if (name == "join") {
    return Value::Func(name, [s](CallArgs& a) -> StatusOr<Value> {
      ASSIGN_OR_RETURN(auto items, Iterate(a.Get(0, "iterable")));
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].is_string())
          return TypeErr("sequence item " + std::to_string(i) + ": expected str instance, " +
                         TypeName(items[i]) + " found");
        if (i) out += s;
        out += items[i].s;
      }
      return Value::Str(std::move(out));
    });
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isupper" ||
      name == "islower") {
    return Value::Func(name, [s, name](CallArgs&) -> StatusOr<Value> {
      const std::u32string u = Utf8Decode(s);
      if (name == "isupper" || name == "islower") {
        const std::string conv = name == "isupper" ? ToUpper(s) : ToLower(s);
        const std::string other = name == "isupper" ? ToLower(s) : ToUpper(s);
        return Value::Bool(conv == s && other != s);
      }
      if (u.empty()) return Value::Bool(false);
      for (char32_t c : u) {
        const auto cat = utf8proc_category(c);
        const bool ok = name == "isdigit" ? cat == UTF8PROC_CATEGORY_ND
                        : name == "isspace"
                            ? IsPySpace(c)
                            : (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO);
        if (!ok) return Value::Bool(false);
      }
      return Value::Bool(true);
    });
  }
  return std::nullopt;
}

std::optional<Value> DictMethod(const Value& obj, const std::string& name) {
  auto d = obj.dict;
  if (name == "get") {
    return Value::Func(name, [d](CallArgs& a) -> StatusOr<Value> {
      const Value* v = d->Find(a.Get(0, "key"));
      if (v) return *v;
      bool present;
      Value def = a.Get(1, "default", &present);
      return present ? def : Value::None();
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return Value::Func(name, [d, name](CallArgs&) -> StatusOr<Value> {
      std::vector<Value> out;
      for (const auto& [k, v] : d->items) {
        if (name == "items")
          out.push_back(Value::NewList({k, v}, true));
        else
          out.push_back(name == "keys" ? k : v);
      }
      return Value::NewList(std::move(out));
    });
  }
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" ||
      name == "clear")
    return Unsafe(obj, name);
  if (name == "copy")
    return Value::Func(name, [d](CallArgs&) -> StatusOr<Value> {
      Value v = Value::NewDict();
      v.dict->items = d->items;
      return v;
    });
  return std::nullopt;
}

std::optional<Value> ListMethod(const Value& obj, const std::string& name) {
  auto l = obj.list;
  if (name == "index" || name == "count") {
    return Value::Func(name, [l, name](CallArgs& a) -> StatusOr<Value> {
      const Value x = a.Get(0, "value");
      int64_t n = 0;
      for (size_t i = 0; i < l->items.size(); ++i) {
        if (Equal(l->items[i], x)) {
          if (name == "index") return Value::Int(static_cast<int64_t>(i));
          ++n;
        }
      }
      if (name == "index") return InvalidArgument(PyRepr(x) + " is not in list");
      return Value::Int(n);
    });
  }
  if (!l->tuple && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                    name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
    return Unsafe(obj, name);
  return std::nullopt;
}

StatusOr<int64_t> ToIndex(const Value& v) {
  if (v.is_int()) return v.AsInt();
  return TypeErr("slice indices must be integers or None");
}

}  // namespace

std::string ToUpper(const std::string& s) {
  std::u32string u = Utf8Decode(s);
  for (auto& c : u) c = utf8proc_toupper(c);
  return Utf8Encode(u);
}
std::string ToLower(const std::string& s) {
  std::u32string u = Utf8Decode(s);
  for (auto& c : u) c = utf8proc_tolower(c);
  return Utf8Encode(u);
}

Status UndefinedError(const Value& v) {
  return InvalidArgument(v.s.empty() ? "value is undefined" : v.s);
}

StatusOr<Value> GetAttr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) return UndefinedError(obj);
  std::optional<Value> m;
  if (obj.is_string()) m = StrMethod(obj, name);
  if (obj.is_dict()) m = DictMethod(obj, name);
  if (obj.is_list()) m = ListMethod(obj, name);
  if (m) return *m;
  if (obj.is_dict() || obj.kind == Value::Kind::kNamespace) {
    const Value* v = obj.dict->Find(Value::Str(name));
    if (v) return *v;
  }
  return Value::Undefined("'" + TypeName(obj) + " object' has no attribute '" + name + "'");
}

StatusOr<Value> GetItem(const Value& obj, const Value& key) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (obj.is_dict() || obj.kind == Value::Kind::kNamespace) {
    const Value* v = obj.dict->Find(key);
    if (v) return *v;
  } else if ((obj.is_list() || obj.is_string()) && key.is_int()) {
    const int64_t n = obj.is_list() ? static_cast<int64_t>(obj.list->items.size())
                                    : static_cast<int64_t>(Utf8Length(obj.s));
    int64_t i = key.AsInt();
    if (i < 0) i += n;
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.list->items[i];
      const std::u32string u = Utf8Decode(obj.s);
      return Value::Str(Utf8Encode(std::u32string(1, u[i])));
    }
  }
  if (key.is_string() && obj.kind != Value::Kind::kNamespace) return GetAttr(obj, key.s);
  return Value::Undefined("'" + TypeName(obj) + " object' has no element " + PyRepr(key));
}

StatusOr<Value> SliceOf(const Value& obj, const Value& start, const Value& stop,
                        const Value& step) {
  if (obj.is_undefined()) return UndefinedError(obj);
  if (!obj.is_list() && !obj.is_string())
    return TypeErr("'" + TypeName(obj) + "' object is not subscriptable");
  auto given = [](const Value& v) { return !v.is_undefined() && !v.is_none(); };
  int64_t st = 1;
  if (given(step)) {
    ASSIGN_OR_RETURN(st, ToIndex(step));
    if (st == 0) return InvalidArgument("slice step cannot be zero");
  }
  std::u32string u;
  if (obj.is_string()) u = Utf8Decode(obj.s);
  const int64_t n =
      obj.is_list() ? static_cast<int64_t>(obj.list->items.size()) : static_cast<int64_t>(u.size());
  auto clamp = [&](const Value& v, int64_t def) -> StatusOr<int64_t> {
    if (!given(v)) return def;
    ASSIGN_OR_RETURN(int64_t i, ToIndex(v));
    if (i < 0) {
      i += n;
      if (i < 0) i = st < 0 ? -1 : 0;
    } else if (i >= n) {
      i = st < 0 ? n - 1 : n;
    }
    return i;
  };
  ASSIGN_OR_RETURN(int64_t b, clamp(start, st < 0 ? n - 1 : 0));
  ASSIGN_OR_RETURN(int64_t e, clamp(stop, st < 0 ? -1 : n));
  std::vector<Value> items;
  std::u32string chars;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) {
    if (obj.is_list())
      items.push_back(obj.list->items[i]);
    else
      chars.push_back(u[i]);
  }
  if (obj.is_list()) return Value::NewList(std::move(items), obj.list->tuple);
  return Value::Str(Utf8Encode(chars));
}

StatusOr<std::vector<Value>> Iterate(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return std::vector<Value>{};
    case Value::Kind::kList:
      return v.list->items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& kv : v.dict->items) keys.push_back(kv.first);
      return keys;
    }
    case Value::Kind::kString: {
      std::vector<Value> out;
      for (char32_t c : Utf8Decode(v.s))
        out.push_back(Value::Str(Utf8Encode(std::u32string(1, c))));
      return out;
    }
    default:
      return TypeErr("'" + TypeName(v) + "' object is not iterable");
  }
}

StatusOr<bool> Contains(const Value& container, const Value& item) {
  if (container.is_string()) {
    if (!item.is_string())
      return TypeErr("'in <string>' requires string as left operand, not " + TypeName(item));
    return container.s.find(item.s) != std::string::npos;
  }
  if (container.is_dict()) return container.dict->Find(item) != nullptr;
  if (container.is_list()) {
    for (const auto& x : container.list->items) {
      if (Equal(x, item)) return true;
    }
    return false;
  }
  if (container.is_undefined()) return false;
  return TypeErr("argument of type '" + TypeName(container) + "' is not iterable");
}

StatusOr<Value> BinaryOp(const std::string& op, const Value& a, const Value& b,
                         const RenderOptions& opts) {
  if (a.is_undefined()) return UndefinedError(a);
  if (b.is_undefined()) return UndefinedError(b);
  const auto bad = [&]() -> Status {
    return TypeErr("unsupported operand type(s) for " + op + ": '" + TypeName(a) + "' and '" +
                   TypeName(b) + "'");
  };
  if (a.is_number() && b.is_number()) {
    const bool fl = a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat;
    const double x = a.AsDouble(), y = b.AsDouble();
    const int64_t p = a.AsInt(), q = b.AsInt();
    int64_t r = 0;
    if (op == "+") {
      if (fl) return Value::Float(x + y);
      if (__builtin_add_overflow(p, q, &r)) return OutOfRange("integer overflow");
      return Value::Int(r);
    }
    if (op == "-") {
      if (fl) return Value::Float(x - y);
      if (__builtin_sub_overflow(p, q, &r)) return OutOfRange("integer overflow");
      return Value::Int(r);
    }
    if (op == "*") {
      if (fl) return Value::Float(x * y);
      if (__builtin_mul_overflow(p, q, &r)) return OutOfRange("integer overflow");
      return Value::Int(r);
    }
    if (op == "/") {
      if (y == 0) return InvalidArgument("division by zero");
      return Value::Float(x / y);
    }
    if (op == "//" || op == "%") {
      if (fl) {
        if (y == 0) return InvalidArgument("float division by zero");
        const double m = std::fmod(x, y);
        const double mod = (m != 0 && ((m < 0) != (y < 0))) ? m + y : m;
        if (op == "%") return Value::Float(mod);
        const double div = (x - mod) / y;
        double fd = std::floor(div);
        if (div - fd > 0.5) fd += 1;
        return Value::Float(fd);
      }
      if (q == 0) return InvalidArgument("integer division or modulo by zero");
      if (p == std::numeric_limits<int64_t>::min() && q == -1)
        return OutOfRange("integer overflow");
      int64_t d = p / q, m = p % q;
      if (m != 0 && ((m < 0) != (q < 0))) {
        --d;
        m += q;
      }
      return Value::Int(op == "//" ? d : m);
    }
    if (op == "**") {
      if (!fl && q >= 0) {
        int64_t acc = 1;
        for (int64_t k = 0; k < q; ++k) {
          if (__builtin_mul_overflow(acc, p, &acc)) return OutOfRange("integer overflow");
          if (acc == 0 || acc == 1) break;
        }
        return Value::Int(acc);
      }
      if (x == 0 && y < 0) return InvalidArgument("0.0 cannot be raised to a negative power");
      return Value::Float(std::pow(x, y));
    }
    return bad();
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) return Value::Str(a.s + b.s);
    if (a.is_list() && b.is_list() && a.list->tuple == b.list->tuple) {
      std::vector<Value> items = a.list->items;
      items.insert(items.end(), b.list->items.begin(), b.list->items.end());
      return Value::NewList(std::move(items), a.list->tuple);
    }
    return bad();
  }
  if (op == "*" && (a.is_int() || b.is_int()) &&
      (a.is_string() || b.is_string() || a.is_list() || b.is_list())) {
    const Value& seq = a.is_int() ? b : a;
    const int64_t n = std::max<int64_t>(0, (a.is_int() ? a : b).AsInt());
    const size_t len = seq.is_string() ? seq.s.size() : seq.list->items.size();
    if (n > 0 && len > 0 &&
        (static_cast<size_t>(n) > opts.max_value_items || len * n > opts.max_output_bytes))
      return OutOfRange("sequence repetition exceeds the render limits");
    if (seq.is_string()) {
      std::string out;
      for (int64_t k = 0; k < n; ++k) out += seq.s;
      return Value::Str(std::move(out));
    }
    std::vector<Value> items;
    for (int64_t k = 0; k < n; ++k)
      items.insert(items.end(), seq.list->items.begin(), seq.list->items.end());
    return Value::NewList(std::move(items), seq.list->tuple);
  }
  return bad();
}

}  // namespace sluice::chat
