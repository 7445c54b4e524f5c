// Chat templates: a Jinja2 engine for the subset Hugging Face chat templates use, rendering
// exactly as transformers does (jinja2's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and loop controls; its tojson, raise_exception and strftime_now). What is
// supported, the limits and how parity is tested: docs/chat_templates.md.
//
//   ASSIGN_OR_RETURN(chat::Template t, chat::Template::Parse(text));
//   Value ctx = Value::NewDict();
//   ctx.Set("messages", ...).Set("add_generation_prompt", Value::Bool(true));
//   ASSIGN_OR_RETURN(std::string prompt, t.Render(ctx));
//
// A Template is immutable after Parse; concurrent Render calls are safe (each render owns
// its values; the context Value must not be shared with another thread during a render).
#pragma once

#include <simdjson.h>

#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "chat/value.h"
#include "sluice/status.h"

namespace sluice::chat {

struct RenderOptions {
  // The clock of strftime_now(fmt); unset: the local time at the call.
  std::optional<std::tm> now;
  size_t max_output_bytes = size_t{16} << 20;    // rendered text (and any captured block)
  size_t max_loop_iterations = size_t{1} << 20;  // all for-loop iterations of one render
  int max_call_depth = 64;                       // nested macro / caller() calls
  size_t max_value_items = size_t{1} << 20;      // range(), list/str repetition
};

struct Stmt;

class Template {
 public:
  // Syntax errors are InvalidArgument naming the line ("template syntax error at line N: ...").
  static StatusOr<Template> Parse(std::string_view text);

  // Renders with `context` (a dict: messages, tools, add_generation_prompt, bos_token, any
  // chat_template_kwargs). Runtime errors (raise_exception, undefined values used in an
  // operation, type errors, limits) are InvalidArgument naming the line; raise_exception's
  // message is included verbatim.
  StatusOr<std::string> Render(const Value& context, const RenderOptions& options = {}) const;

 private:
  std::shared_ptr<const std::vector<std::shared_ptr<const Stmt>>> body_;
};

// JSON (simdjson DOM) to Value: objects keep their key order; integers stay ints.
Value FromJson(simdjson::dom::element element);
StatusOr<Value> ParseJson(std::string_view json);

}  // namespace sluice::chat
