#include "io/builtins.h"

#include <atomic>
#include <chrono>
#include <cstdio>

#include "io/json.h"

namespace sluice::io {

std::string NewResponseId(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t seed =
      static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s-%016llx", prefix,
                static_cast<unsigned long long>(seed * 0x9E3779B97F4A7C15ull + counter++));
  return buf;
}

int64_t UnixSeconds() {
  using namespace std::chrono;
  return duration_cast<seconds>(system_clock::now().time_since_epoch()).count();
}

void BeginResponse(JsonWriter& w, Envelope kind, const char* id_prefix, const std::string& model) {
  w.BeginObject();
  w.KeyString("id", NewResponseId(id_prefix));
  if (kind != Envelope::kRerank) {
    w.KeyString("object", "list");
    w.KeyInt("created", UnixSeconds());
  }
  w.KeyString("model", model);
  w.Key(kind == Envelope::kRerank ? "results" : "data");
  w.BeginArray();
}

void EndResponse(JsonWriter& w, Envelope kind, int64_t prompt_tokens) {
  w.EndArray();
  w.Key("usage");
  w.BeginObject();
  if (kind != Envelope::kRerank) w.KeyInt("prompt_tokens", prompt_tokens);
  w.KeyInt("total_tokens", prompt_tokens);
  if (kind == Envelope::kListWithCompletion) w.KeyInt("completion_tokens", 0);
  w.EndObject();
  w.EndObject();
}

}  // namespace sluice::io
