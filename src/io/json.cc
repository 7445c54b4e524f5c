#include "io/json.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace sluice::io {

void JsonWriter::Sep() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (!first_.empty()) {
    if (!first_.back()) out_.push_back(',');
    first_.back() = false;
  }
}

void JsonWriter::Open(char c) {
  Sep();
  out_.push_back(c);
  first_.push_back(true);
}

void JsonWriter::Close(char c) {
  out_.push_back(c);
  first_.pop_back();
}

void JsonWriter::Key(std::string_view k) {
  Sep();
  AppendEscaped(&out_, k);
  out_.push_back(':');
  after_key_ = true;
}

void JsonWriter::String(std::string_view s) {
  Sep();
  AppendEscaped(&out_, s);
}

void JsonWriter::Float(float v) {
  Sep();
  if (!std::isfinite(v)) {
    out_.append("null");
    return;
  }
  char buf[32];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out_.append(buf, r.ptr);
}

void JsonWriter::Int(int64_t v) {
  Sep();
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out_.append(buf, r.ptr);
}

void JsonWriter::Bool(bool v) {
  Sep();
  out_.append(v ? "true" : "false");
}

void JsonWriter::Null() {
  Sep();
  out_.append("null");
}

void JsonWriter::Raw(std::string_view json) {
  Sep();
  out_.append(json);
}

void JsonWriter::Floats(const float* v, size_t n) {
  BeginArray();
  for (size_t i = 0; i < n; ++i) Float(v[i]);
  EndArray();
}

void JsonWriter::Ints(const std::vector<int32_t>& v) {
  BeginArray();
  for (int32_t x : v) Int(x);
  EndArray();
}

void AppendEscaped(std::string* out, std::string_view s) {
  static const char* kHex = "0123456789abcdef";
  out->push_back('"');
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (c == '\n') {
      out->append("\\n");
    } else if (c == '\t') {
      out->append("\\t");
    } else if (c == '\r') {
      out->append("\\r");
    } else if (u < 0x20) {
      out->append("\\u00");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 15]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

std::string Base64(const void* data, size_t n) {
  static const char* kAlpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  const auto* p = static_cast<const unsigned char*>(data);
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < n; i += 3) {
    const uint32_t v = (p[i] << 16) | (p[i + 1] << 8) | p[i + 2];
    out.push_back(kAlpha[v >> 18]);
    out.push_back(kAlpha[(v >> 12) & 63]);
    out.push_back(kAlpha[(v >> 6) & 63]);
    out.push_back(kAlpha[v & 63]);
  }
  if (i < n) {
    uint32_t v = p[i] << 16;
    if (i + 1 < n) v |= p[i + 1] << 8;
    out.push_back(kAlpha[v >> 18]);
    out.push_back(kAlpha[(v >> 12) & 63]);
    out.push_back(i + 1 < n ? kAlpha[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

Fields::Fields(simdjson::dom::object obj, std::string where)
    : obj_(obj), where_(std::move(where)) {}

std::string Fields::Path(std::string_view name) const {
  return where_.empty() ? std::string(name) : where_ + "." + std::string(name);
}

bool Fields::Get(std::string_view name, simdjson::dom::element* out) {
  asked_.emplace_back(name);
  simdjson::dom::element e;
  if (obj_[name].get(e) != simdjson::SUCCESS || e.is_null()) return false;
  *out = e;
  return true;
}

Status Fields::GetString(std::string_view name, std::string* out) {
  simdjson::dom::element e;
  if (!Get(name, &e)) return Status::Ok();
  std::string_view s;
  if (e.get(s)) return FieldError(Path(name), "must be a string");
  *out = std::string(s);
  return Status::Ok();
}

Status Fields::GetBool(std::string_view name, bool* out) {
  simdjson::dom::element e;
  if (!Get(name, &e)) return Status::Ok();
  if (e.get(*out)) return FieldError(Path(name), "must be true or false");
  return Status::Ok();
}

Status Fields::GetInt(std::string_view name, int64_t* out) {
  simdjson::dom::element e;
  if (!Get(name, &e)) return Status::Ok();
  if (e.get(*out)) return FieldError(Path(name), "must be an integer");
  return Status::Ok();
}

Status Fields::CheckNoUnknown() const {
  // A key given twice is refused: JSON leaves its meaning open (simdjson would read the first).
  std::vector<std::string_view> keys;
  for (auto [key, value] : obj_) keys.push_back(key);
  std::sort(keys.begin(), keys.end());
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] == keys[i - 1]) return FieldError(Path(keys[i]), "appears more than once");
  }
  for (auto [key, value] : obj_) {
    bool known = false;
    for (const auto& a : asked_) known |= (a == key);
    if (!known) {
      return FieldError(Path(key), "is not a field this endpoint supports");
    }
  }
  return Status::Ok();
}

StatusOr<simdjson::dom::object> ParseObject(std::string_view body) {
  thread_local simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (auto err = parser.parse(body.data(), body.size()).get(doc)) {
    return InvalidArgument(std::string("the request body is not valid JSON: ") +
                           simdjson::error_message(err));
  }
  simdjson::dom::object obj;
  if (doc.get(obj)) return InvalidArgument("the request body must be a JSON object");
  return obj;
}

Status FieldError(const std::string& path, const std::string& what) {
  return InvalidArgument("\"" + path + "\" " + what);
}

}  // namespace sluice::io
