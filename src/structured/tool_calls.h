// Tool-call constraints (chat tool_choice "required" / a named function, strict tools): the
// model's tool-call format around each function's arguments, in the Hermes/Qwen form the chat
// output parser reads (io/chat.h):
//
//   <tool_call>\n{"name": "NAME", "arguments": ARGS}\n</tool_call>
//
// ARGS is the function's `parameters` JSON Schema (a function without parameters: `{}`), or,
// for a tool whose schema is not enforced, any JSON object. Calls are separated by "\n".
//
//   named:    exactly one call of that function;
//   required: one or more calls, each of any of the tools;
//   auto:     free text without "<tool_call>", then optionally one or more calls (any tool).
//
// With `reasoning` (the prompt left a <think> block open) the output first closes it: any text
// without "</think>", then "</think>" and up to two newlines.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "structured/automaton.h"
#include "structured/json_schema.h"

namespace sluice::structured {

struct ToolCallTool {
  std::string name;
  std::string parameters;  // a JSON Schema; empty = no parameters
  bool enforce = true;     // arguments follow `parameters`; false = any JSON object
  std::string field;       // e.g. "tools[0].function.parameters" (errors name it)
};

struct ToolCallSpec {
  enum class Mode { kAuto, kRequired, kNamed };
  Mode mode = Mode::kRequired;
  std::vector<ToolCallTool> tools;  // kNamed: the one function
  bool reasoning = false;
};

// The spec as the text of a ConstraintSpec (kToolCalls) and back.
std::string EncodeToolCallSpec(const ToolCallSpec& spec);
StatusOr<ToolCallSpec> DecodeToolCallSpec(std::string_view text);

StatusOr<ExprP> CompileToolCalls(const ToolCallSpec& spec, const JsonOptions& options);

}  // namespace sluice::structured
