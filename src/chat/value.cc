#include "chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace sluice::chat {

const Value* DictObj::Find(const Value& key) const {
  for (const auto& [k, v] : items) {
    if (Equal(k, key)) return &v;
  }
  return nullptr;
}

void DictObj::Set(Value key, Value value) {
  for (auto& [k, v] : items) {
    if (Equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

Value Value::Undefined(std::string why) {
  Value v;
  v.s = std::move(why);
  return v;
}
Value Value::None() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}
Value Value::Bool(bool x) {
  Value v;
  v.kind = Kind::kBool;
  v.b = x;
  return v;
}
Value Value::Int(int64_t x) {
  Value v;
  v.kind = Kind::kInt;
  v.i = x;
  return v;
}
Value Value::Float(double x) {
  Value v;
  v.kind = Kind::kFloat;
  v.f = x;
  return v;
}
Value Value::Str(std::string x) {
  Value v;
  v.kind = Kind::kString;
  v.s = std::move(x);
  return v;
}
Value Value::NewList(std::vector<Value> items, bool tuple) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<ListObj>();
  v.list->items = std::move(items);
  v.list->tuple = tuple;
  return v;
}
Value Value::NewDict() {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<DictObj>();
  return v;
}
Value Value::NewNamespace() {
  Value v = NewDict();
  v.kind = Kind::kNamespace;
  return v;
}
Value Value::Func(std::string name, Function fn) {
  Value v;
  v.kind = Kind::kCallable;
  v.fn = std::make_shared<Callable>(Callable{std::move(name), std::move(fn)});
  return v;
}
Value& Value::Append(Value v) {
  list->items.push_back(std::move(v));
  return *this;
}
Value& Value::Set(std::string key, Value v) {
  dict->Set(Str(std::move(key)), std::move(v));
  return *this;
}

Value CallArgs::Get(size_t idx, std::string_view name, bool* present) const {
  if (present) *present = true;
  if (idx < pos.size()) return pos[idx];
  for (const auto& [k, v] : kw) {
    if (k == name) return v;
  }
  if (present) *present = false;
  return Value::Undefined();
}

bool Truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.b;
    case Value::Kind::kInt:
      return v.i != 0;
    case Value::Kind::kFloat:
      return v.f != 0;
    case Value::Kind::kString:
      return !v.s.empty();
    case Value::Kind::kList:
      return !v.list->items.empty();
    case Value::Kind::kDict:
      return !v.dict->items.empty();
    default:
      return true;
  }
}

bool Equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat)
      return a.AsDouble() == b.AsDouble();
    return a.AsInt() == b.AsInt();
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.s == b.s;
    case Value::Kind::kList:
      if (a.list->tuple != b.list->tuple || a.list->items.size() != b.list->items.size())
        return false;
      for (size_t i = 0; i < a.list->items.size(); ++i) {
        if (!Equal(a.list->items[i], b.list->items[i])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [k, v] : a.dict->items) {
        const Value* o = b.dict->Find(k);
        if (!o || !Equal(v, *o)) return false;
      }
      return true;
    default:
      return a.dict == b.dict && a.fn == b.fn;
  }
}

StatusOr<int> Compare(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.kind == Value::Kind::kFloat || b.kind == Value::Kind::kFloat) {
      const double x = a.AsDouble(), y = b.AsDouble();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    const int64_t x = a.AsInt(), y = b.AsInt();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.s.compare(b.s);  // UTF-8 byte order == code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.list->tuple == b.list->tuple) {
    const auto& x = a.list->items;
    const auto& y = b.list->items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (Equal(x[i], y[i])) continue;
      return Compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return InvalidArgument("'<' not supported between instances of '" + TypeName(a) + "' and '" +
                         TypeName(b) + "'");
}

std::string TypeName(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return v.list->tuple ? "tuple" : "list";
    case Value::Kind::kDict:
      return "dict";
    case Value::Kind::kNamespace:
      return "Namespace";
    case Value::Kind::kCallable:
      return "function";
  }
  return "object";
}

std::string FloatRepr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  // sci: [-]d[.ddd]e[+-]XX
  bool neg = false;
  size_t p = 0;
  if (sci[0] == '-') {
    neg = true;
    p = 1;
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (size_t k = p; k < e; ++k) {
    if (sci[k] != '.') digits += sci[k];
  }
  const int exp = std::stoi(sci.substr(e + 1));
  std::string out = neg ? "-" : "";
  if (exp >= -5 + 1 && exp < 16) {  // Python repr: fixed for -4 <= exp < 16
    if (exp < 0) {
      out += "0." + std::string(-exp - 1, '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out += digits + std::string(exp + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, exp + 1) + "." + digits.substr(exp + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof(eb), "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + eb;
}

namespace {

std::string StrRepr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char q = dq ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == q) {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof(b), "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

void JsonString(const std::string& s, std::string* out) {
  *out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
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
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof(b), "\\u%04x", c);
          *out += b;
        } else {
          *out += static_cast<char>(c);
        }
    }
  }
  *out += '"';
}

Status JsonRec(const Value& v, const JsonOptions& o, int depth, std::string* out) {
  if (depth > 256) return InvalidArgument("tojson: nesting too deep");
  const bool ind = o.indent >= 0 || !o.indent_str.empty();
  const std::string unit =
      !o.indent_str.empty() ? o.indent_str : std::string(std::max(o.indent, 0), ' ');
  const std::string item_sep = o.has_separators ? o.item_sep : (ind ? "," : ", ");
  const std::string key_sep = o.has_separators ? o.key_sep : ": ";
  auto newline = [&](int d) {
    *out += '\n';
    for (int k = 0; k < d; ++k) *out += unit;
  };
  switch (v.kind) {
    case Value::Kind::kNone:
      *out += "null";
      return Status::Ok();
    case Value::Kind::kBool:
      *out += v.b ? "true" : "false";
      return Status::Ok();
    case Value::Kind::kInt:
      *out += std::to_string(v.i);
      return Status::Ok();
    case Value::Kind::kFloat:
      if (std::isnan(v.f)) {
        *out += "NaN";
      } else if (std::isinf(v.f)) {
        *out += v.f > 0 ? "Infinity" : "-Infinity";
      } else {
        *out += FloatRepr(v.f);
      }
      return Status::Ok();
    case Value::Kind::kString:
      JsonString(v.s, out);
      return Status::Ok();
    case Value::Kind::kList: {
      if (v.list->items.empty()) {
        *out += "[]";
        return Status::Ok();
      }
      *out += '[';
      bool first = true;
      for (const auto& x : v.list->items) {
        if (!first) *out += item_sep;
        first = false;
        if (ind) newline(depth + 1);
        RETURN_IF_ERROR(JsonRec(x, o, depth + 1, out));
      }
      if (ind) newline(depth);
      *out += ']';
      return Status::Ok();
    }
    case Value::Kind::kDict: {
      if (v.dict->items.empty()) {
        *out += "{}";
        return Status::Ok();
      }
      std::vector<std::pair<std::string, const Value*>> items;
      for (const auto& [k, x] : v.dict->items) {
        std::string key;
        if (k.is_string()) {
          key = k.s;
        } else if (k.kind == Value::Kind::kInt) {
          key = std::to_string(k.i);
        } else if (k.kind == Value::Kind::kBool) {
          key = k.b ? "true" : "false";
        } else if (k.is_none()) {
          key = "null";
        } else if (k.kind == Value::Kind::kFloat) {
          key = FloatRepr(k.f);
        } else {
          return InvalidArgument("keys must be str, int, float, bool or None, not " + TypeName(k));
        }
        items.emplace_back(std::move(key), &x);
      }
      if (o.sort_keys) {
        std::stable_sort(items.begin(), items.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      }
      *out += '{';
      bool first = true;
      for (const auto& [k, x] : items) {
        if (!first) *out += item_sep;
        first = false;
        if (ind) newline(depth + 1);
        JsonString(k, out);
        *out += key_sep;
        RETURN_IF_ERROR(JsonRec(*x, o, depth + 1, out));
      }
      if (ind) newline(depth);
      *out += '}';
      return Status::Ok();
    }
    default:
      return InvalidArgument("Object of type " + TypeName(v) + " is not JSON serializable");
  }
}

}  // namespace

StatusOr<std::string> ToJson(const Value& v, const JsonOptions& opts) {
  std::string out;
  RETURN_IF_ERROR(JsonRec(v, opts, 0, &out));
  return out;
}

std::string PyRepr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kString:
      return StrRepr(v.s);
    case Value::Kind::kList: {
      std::string out = v.list->tuple ? "(" : "[";
      for (size_t k = 0; k < v.list->items.size(); ++k) {
        if (k) out += ", ";
        out += PyRepr(v.list->items[k]);
      }
      if (v.list->tuple && v.list->items.size() == 1) out += ",";
      return out + (v.list->tuple ? ")" : "]");
    }
    case Value::Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, x] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += PyRepr(k) + ": " + PyRepr(x);
      }
      return out + "}";
    }
    default:
      return PyStr(v);
  }
}

std::string PyStr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.b ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.i);
    case Value::Kind::kFloat:
      return FloatRepr(v.f);
    case Value::Kind::kString:
      return v.s;
    case Value::Kind::kNamespace:
      return "<Namespace>";
    case Value::Kind::kCallable:
      return "<function " + v.fn->name + ">";
    default:
      return PyRepr(v);
  }
}

std::u32string Utf8Decode(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + len > s.size()) len = 1;
    char32_t cp = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
    for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out.push_back(cp);
    i += len;
  }
  return out;
}

std::string Utf8Encode(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xc0) != 0x80;
  return n;
}

}  // namespace sluice::chat
