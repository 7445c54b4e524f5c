// JSON for the IO processors: a small append-only writer (floats via std::to_chars,
// shortest round-trip form) and request readers over simdjson that name the field in
// every error and refuse fields the endpoint does not support.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::io {

class JsonWriter {
 public:
  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(std::string_view k);
  void String(std::string_view s);
  void Float(float v);  // non-finite -> null
  void Int(int64_t v);
  void Bool(bool v);
  void Null();
  // A value already serialised as JSON (written as is).
  void Raw(std::string_view json);
  void Floats(const float* v, size_t n);
  void Ints(const std::vector<int32_t>& v);
  // "key": value.
  void KeyString(std::string_view k, std::string_view v) {
    Key(k);
    String(v);
  }
  void KeyInt(std::string_view k, int64_t v) {
    Key(k);
    Int(v);
  }
  void KeyFloat(std::string_view k, float v) {
    Key(k);
    Float(v);
  }
  // Convenience: "key": value.
  template <typename F>
  void Field(std::string_view k, F&& write) {
    Key(k);
    write();
  }
  std::string& str() { return out_; }
  std::string Take() { return std::move(out_); }

 private:
  void Open(char c);
  void Close(char c);
  void Sep();
  std::string out_;
  std::vector<bool> first_;  // per open container: no element written yet
  bool after_key_ = false;
};

void AppendEscaped(std::string* out, std::string_view s);
std::string Base64(const void* data, size_t n);

// Reads the fields of one JSON object, tracking which were used.
class Fields {
 public:
  // `where` prefixes errors ("" for the top level, "documents[2]" for nested objects).
  Fields(simdjson::dom::object obj, std::string where);
  // Returns true and sets *out when the field is present (null counts as absent).
  bool Get(std::string_view name, simdjson::dom::element* out);
  // Typed getters: absent leaves *out unchanged; wrong type is InvalidArgument.
  Status GetString(std::string_view name, std::string* out);
  Status GetBool(std::string_view name, bool* out);
  Status GetInt(std::string_view name, int64_t* out);
  // Errors on a field given twice, then on the first field never asked for.
  Status CheckNoUnknown() const;
  std::string Path(std::string_view name) const;

 private:
  simdjson::dom::object obj_;
  std::string where_;
  std::vector<std::string> asked_;
};

// Parses `body` into a document held by a thread-local parser (valid until the next call
// on this thread). Errors are InvalidArgument with simdjson's reason.
StatusOr<simdjson::dom::object> ParseObject(std::string_view body);

Status FieldError(const std::string& path, const std::string& what);

}  // namespace sluice::io
