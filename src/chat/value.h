// Value: the dynamic value of the chat-template engine (src/chat/template.h), with
// Python's semantics where templates observe them: truthiness, ==, ordering, str() and
// repr(), json.dumps. Lists and dicts are shared by reference, as in Python.
// Not thread-safe: a Value graph belongs to one render.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sluice/status.h"

namespace sluice::chat {

struct Value;
struct CallArgs;
using Function = std::function<StatusOr<Value>(CallArgs&)>;

struct ListObj {
  std::vector<Value> items;
  bool tuple = false;  // repr as (a, b)
};
struct DictObj {
  std::vector<std::pair<Value, Value>> items;  // insertion order, as Python dicts
  const Value* Find(const Value& key) const;
  void Set(Value key, Value value);
};
struct Callable {
  std::string name;
  Function fn;
};

struct Value {
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };
  Kind kind = Kind::kUndefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  // string value; for kUndefined, a description for errors ("'x' is undefined")
  std::shared_ptr<ListObj> list;
  std::shared_ptr<DictObj> dict;  // kDict and kNamespace
  std::shared_ptr<Callable> fn;

  static Value Undefined(std::string why = "value is undefined");
  static Value None();
  static Value Bool(bool v);
  static Value Int(int64_t v);
  static Value Float(double v);
  static Value Str(std::string v);
  static Value NewList(std::vector<Value> items = {}, bool tuple = false);
  static Value NewDict();
  static Value NewNamespace();
  static Value Func(std::string name, Function fn);

  bool is_undefined() const { return kind == Kind::kUndefined; }
  bool is_none() const { return kind == Kind::kNone; }
  bool is_string() const { return kind == Kind::kString; }
  bool is_list() const { return kind == Kind::kList; }
  bool is_dict() const { return kind == Kind::kDict; }
  bool is_number() const {
    return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool;
  }
  bool is_int() const { return kind == Kind::kInt || kind == Kind::kBool; }
  double AsDouble() const {
    return kind == Kind::kFloat ? f : static_cast<double>(kind == Kind::kBool ? b : i);
  }
  int64_t AsInt() const { return kind == Kind::kBool ? b : i; }

  // Builders for C++ callers (context construction).
  Value& Append(Value v);                // list
  Value& Set(std::string key, Value v);  // dict
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
  // Positional i or keyword `name`; Undefined with `present` false when neither.
  Value Get(size_t i, std::string_view name, bool* present = nullptr) const;
};

bool Truthy(const Value& v);
bool Equal(const Value& a, const Value& b);
// Python ordering; error for incomparable types.
StatusOr<int> Compare(const Value& a, const Value& b);
std::string TypeName(const Value& v);  // Python's type name: 'str', 'dict', ...
std::string PyStr(const Value& v);     // str(v); Undefined -> ""
std::string PyRepr(const Value& v);
std::string FloatRepr(double d);
struct JsonOptions {
  int indent = -1;  // <0: none
  std::string indent_str;
  bool has_separators = false;
  std::string item_sep, key_sep;
  bool sort_keys = false;
};
StatusOr<std::string> ToJson(const Value& v, const JsonOptions& opts);

// UTF-8 helpers (strings are UTF-8; Python indexes code points).
std::u32string Utf8Decode(std::string_view s);
std::string Utf8Encode(std::u32string_view s);
size_t Utf8Length(std::string_view s);

}  // namespace sluice::chat
