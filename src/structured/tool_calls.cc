#include "structured/tool_calls.h"

#include <simdjson.h>

#include "structured/regex.h"

namespace sluice::structured {
namespace {

constexpr std::string_view kOpen = "<tool_call>\n{\"name\": ", kClose = "}\n</tool_call>";

// Any text that does not contain `s`.
ExprP Without(std::string_view s) {
  const ExprP any = Star(AnyCodepoint());
  return AndNot(any, Concat({any, Literal(s), any}));
}

const char* ModeName(ToolCallSpec::Mode m) {
  switch (m) {
    case ToolCallSpec::Mode::kAuto:
      return "auto";
    case ToolCallSpec::Mode::kRequired:
      return "required";
    case ToolCallSpec::Mode::kNamed:
      return "named";
  }
  return "";
}

}  // namespace

std::string EncodeToolCallSpec(const ToolCallSpec& spec) {
  std::string s = "{\"mode\":\"" + std::string(ModeName(spec.mode)) +
                  "\",\"reasoning\":" + (spec.reasoning ? "true" : "false") + ",\"tools\":[";
  for (size_t i = 0; i < spec.tools.size(); ++i) {
    const ToolCallTool& t = spec.tools[i];
    s += (i ? "," : "") + std::string("{\"name\":") + JsonQuote(t.name) +
         ",\"parameters\":" + JsonQuote(t.parameters) +
         ",\"enforce\":" + (t.enforce ? "true" : "false") + ",\"field\":" + JsonQuote(t.field) +
         "}";
  }
  return s + "]}";
}

StatusOr<ToolCallSpec> DecodeToolCallSpec(std::string_view text) {
  simdjson::dom::parser p;
  simdjson::dom::element doc;
  simdjson::dom::array tools;
  std::string_view mode;
  ToolCallSpec spec;
  if (p.parse(std::string(text)).get(doc) || doc["mode"].get(mode) ||
      doc["reasoning"].get(spec.reasoning) || doc["tools"].get(tools)) {
    return Internal("malformed tool-call constraint");
  }
  if (mode == "auto") {
    spec.mode = ToolCallSpec::Mode::kAuto;
  } else if (mode == "named") {
    spec.mode = ToolCallSpec::Mode::kNamed;
  } else {
    spec.mode = ToolCallSpec::Mode::kRequired;
  }
  for (auto t : tools) {
    ToolCallTool tool;
    std::string_view name, params, field;
    if (t["name"].get(name) || t["parameters"].get(params) || t["enforce"].get(tool.enforce) ||
        t["field"].get(field)) {
      return Internal("malformed tool-call constraint");
    }
    tool.name = std::string(name);
    tool.parameters = std::string(params);
    tool.field = std::string(field);
    spec.tools.push_back(std::move(tool));
  }
  return spec;
}

StatusOr<ExprP> CompileToolCalls(const ToolCallSpec& spec, const JsonOptions& options) {
  if (spec.tools.empty()) return InvalidArgument("tools: a tool call needs at least one tool");
  std::vector<ExprP> calls;
  for (const ToolCallTool& t : spec.tools) {
    ExprP args;
    if (!t.enforce) {
      args = JsonObjectExpr(options);
    } else if (t.parameters.empty()) {
      args = Literal("{}");
    } else {
      auto e = CompileJsonSchema(t.parameters, options);
      if (!e.ok()) return InvalidArgument(t.field + ": " + e.status().message());
      args = *e;
    }
    calls.push_back(Concat({Literal(std::string(kOpen) + JsonQuote(t.name) + ", \"arguments\": "),
                            args, Literal(kClose)}));
  }
  const ExprP call = Alt(std::move(calls));
  ExprP body;
  switch (spec.mode) {
    case ToolCallSpec::Mode::kNamed:
      body = call;
      break;
    case ToolCallSpec::Mode::kRequired:
      body = List(call, Literal("\n"), 1, -1);
      break;
    case ToolCallSpec::Mode::kAuto:
      body = Concat({Without("<tool_call>"), Optional(List(call, Literal("\n"), 1, -1))});
      break;
  }
  if (!spec.reasoning) return body;
  return Concat({Without("</think>"), Literal("</think>"), Repeat(Byte('\n'), 0, 2), body});
}

}  // namespace sluice::structured
