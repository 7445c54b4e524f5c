// libFuzzer target over the chat-template engine (src/chat): arbitrary bytes as a template,
// parsed and rendered against a fixed conversation (system/user/assistant with tool calls/tool
// messages, tools, special tokens), under tight limits. Checks: no crash, hang or unbounded
// memory; every failure is a Status naming a line; output within max_output_bytes; rendering
// is deterministic (twice, same result).
//
// Input layout: byte 0 holds flags (add_generation_prompt, tools present, enable_thinking);
// the rest is the template text.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "chat/template.h"

namespace {

using sluice::chat::Template;
using sluice::chat::Value;

[[noreturn]] void Fail(const char* what) {
  std::fprintf(stderr, "chat_template_fuzz invariant violated: %s\n", what);
  std::abort();
}
#define CHECK_INV(cond)       \
  do {                        \
    if (!(cond)) Fail(#cond); \
  } while (0)

Value Msg(const char* role, const char* content) {
  Value m = Value::NewDict();
  m.Set("role", Value::Str(role)).Set("content", Value::Str(content));
  return m;
}

Value Context(uint8_t flags) {
  Value call = Value::NewDict();
  Value fn = Value::NewDict();
  Value args = Value::NewDict();
  args.Set("city", Value::Str("Paris")).Set("days", Value::Int(3)).Set("temp", Value::Float(21.5));
  fn.Set("name", Value::Str("get_weather")).Set("arguments", args);
  call.Set("id", Value::Str("call12345")).Set("type", Value::Str("function")).Set("function", fn);
  Value assistant = Msg("assistant", "");
  assistant.Set("tool_calls", Value::NewList({call}));
  Value tool = Msg("tool", "{\"temp\": 21}");
  tool.Set("tool_call_id", Value::Str("call12345"));
  Value parts = Value::NewList();
  Value part = Value::NewDict();
  part.Set("type", Value::Str("text")).Set("text", Value::Str("part"));
  parts.Append(part);
  Value with_parts = Value::NewDict();
  with_parts.Set("role", Value::Str("user")).Set("content", parts);
  Value messages =
      Value::NewList({Msg("system", "Be brief."), Msg("user", "Weather in Paris?"), assistant, tool,
                      Msg("assistant", "<think>ok</think>21 degrees."), with_parts});
  Value ctx = Value::NewDict();
  ctx.Set("messages", messages)
      .Set("bos_token", Value::Str("<s>"))
      .Set("eos_token", Value::Str("</s>"));
  ctx.Set("add_generation_prompt", Value::Bool(flags & 1));
  if (flags & 2) {
    Value tooldef = Value::NewDict();
    Value f = Value::NewDict();
    f.Set("name", Value::Str("get_weather")).Set("description", Value::Str("Weather"));
    f.Set("parameters", Value::NewDict());
    tooldef.Set("type", Value::Str("function")).Set("function", f);
    ctx.Set("tools", Value::NewList({tooldef}));
  } else {
    ctx.Set("tools", Value::None());
  }
  if (flags & 4) ctx.Set("enable_thinking", Value::Bool(flags & 8));
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 64 * 1024) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  auto t = Template::Parse(text);
  if (!t.ok()) {
    CHECK_INV(t.status().message().find("line ") != std::string::npos);
    return 0;
  }
  sluice::chat::RenderOptions opts;
  opts.max_output_bytes = 1 << 16;
  opts.max_loop_iterations = 1 << 14;
  opts.max_call_depth = 16;
  opts.max_value_items = 1 << 12;
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mday = 1;
  opts.now = tm;
  const Value ctx = Context(data[0]);
  auto a = t->Render(ctx, opts);
  auto b = t->Render(Context(data[0]), opts);
  CHECK_INV(a.ok() == b.ok());
  if (a.ok()) {
    CHECK_INV(a->size() <= opts.max_output_bytes);
    CHECK_INV(*a == *b);
  } else {
    CHECK_INV(a.status().message().find("line ") != std::string::npos);
    CHECK_INV(a.status().message() == b.status().message());
  }
  return 0;
}
