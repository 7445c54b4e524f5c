// /v1/chat/completions request reading, output parsing (reasoning, tool calls) and
// streaming: the concatenated stream deltas equal the non-streaming message for outputs
// arriving in pieces of every size, tags and UTF-8 characters split anywhere.
#include "io/chat.h"

#include <gtest/gtest.h>
#include <simdjson.h>

#include <string>
#include <vector>

namespace sluice::io {
namespace {

const ChatTokens kTokens{"<s>", "</s>"};

TEST(Chat, RequestContextIsNormalised) {
  auto r = ParseChatRequest(R"({"model": "m", "messages": [
      {"role": "developer", "content": "be brief"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "42"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
    "chat_template_kwargs": {"enable_thinking": false}, "max_completion_tokens": 7,
    "logprobs": true, "top_logprobs": 3, "temperature": 0.5, "seed": 3})",
                            kTokens);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  SCOPED_TRACE(r->context_json);
  simdjson::dom::parser p;
  simdjson::dom::element c = p.parse(r->context_json);
  EXPECT_EQ(std::string(c["messages"].at(0)["role"].get_string().value()), "system");
  EXPECT_EQ(std::string(c["messages"].at(1)["content"].get_string().value()), "a\nb");
  EXPECT_EQ(
      c["messages"].at(2)["tool_calls"].at(0)["function"]["arguments"]["x"].get_int64().value(), 1);
  EXPECT_TRUE(c["messages"].at(2)["content"].is_null());
  EXPECT_EQ(std::string(c["tools"].at(0)["function"]["name"].get_string().value()), "f");
  EXPECT_FALSE(c["enable_thinking"].get_bool().value());
  EXPECT_TRUE(c["add_generation_prompt"].get_bool().value());
  EXPECT_EQ(std::string(c["bos_token"].get_string().value()), "<s>");
  EXPECT_TRUE(r->tools_given);
  EXPECT_EQ(*r->params.max_tokens, 7);
  EXPECT_EQ(*r->params.logprobs, 3);
  EXPECT_EQ(*r->params.temperature, 0.5f);
  EXPECT_EQ(*r->params.seed, 3u);
  // tool_choice "none": tools are not rendered.
  auto none = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}],
    "tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "none"})",
                               kTokens);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->tools_given);
  EXPECT_EQ(none->context_json.find("\"tools\""), std::string::npos);
}

TEST(Chat, BadRequestsNameTheProblem) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"messages": []})", "messages"},
      {R"({"messages": [{"role": "bot", "content": "x"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "tool", "content": "x"}]})", "tool_call_id"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": "x", "mood": 1}]})", "mood"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]})",
       "image_url"},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})", "tool_calls"},
      {R"({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "1",
          "type": "function", "function": {"name": "f", "arguments": "{bad"}}]}]})",
       "arguments"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tool_choice": "required"})",
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f", "strict": "yes"}}]})",
       "tools[0].function.strict"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f", "parameters": [1]}}]})",
       "tools[0].function.parameters"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f"}}], "tool_choice": {"type": "function", "function":
          {"name": "g"}}})",
       "tool_choice.function.name"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f"}}], "tool_choice": {"function": {"name": "f"}}})",
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f"}}], "tool_choice": "sometimes"})",
       "tool_choice"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f"}}], "tool_choice": "required",
          "response_format": {"type": "json_object"}})",
       "tool_choice, response_format"},
      {R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function",
          "function": {"name": "f", "strict": true}}], "guided_regex": "a"})",
       "tools (strict), guided_regex"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type":
          "json_schema"}})",
       "response_format.json_schema"},
      {R"({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "yaml"}})",
       "response_format.type"},
      {R"({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3,
          "max_completion_tokens": 4})",
       "max_completion_tokens"},
      {R"({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2})", "top_logprobs"},
      {R"({"messages": [{"role": "user", "content": "x"}], "continue_final_message": true})",
       "continue_final_message"},
      {R"({"messages": [{"role": "user", "content": "x"}], "stream_options": {}})",
       "stream_options"},
      {R"({"messages": [{"role": "user", "content": "x"}], "functions": []})", "functions"},
      {R"({"messages": [{"role": "user", "content": "x"}], "chat_template_kwargs":
          {"messages": 1}})",
       "chat_template_kwargs.messages"},
  };
  for (const auto& [body, needle] : cases) {
    auto r = ParseChatRequest(body, kTokens);
    ASSERT_FALSE(r.ok()) << body;
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << body << " -> " << r.status().message();
  }
}

TEST(Chat, ToolChoiceAndStrictToolsBuildTheToolCallConstraint) {
  const std::string tools = R"("tools": [
      {"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
      {"type": "function", "function": {"name": "b", "strict": true}}])";
  auto spec = [&](const std::string& extra) -> std::optional<structured::ToolCallSpec> {
    auto r = ParseChatRequest(
        R"({"messages": [{"role": "user", "content": "x"}], )" + tools + extra + "}", kTokens);
    EXPECT_TRUE(r.ok()) << extra << ": " << r.status().ToString();
    if (!r.ok()) return std::nullopt;
    EXPECT_FALSE(r->params.constraint.has_value());  // set once the prompt is rendered
    return r->tool_calls;
  };
  auto req = spec(R"(, "tool_choice": "required")");
  ASSERT_TRUE(req.has_value());
  EXPECT_EQ(req->mode, structured::ToolCallSpec::Mode::kRequired);
  ASSERT_EQ(req->tools.size(), 2u);
  EXPECT_TRUE(req->tools[0].enforce && req->tools[1].enforce);
  EXPECT_EQ(req->tools[0].parameters, R"({"type":"object"})");
  EXPECT_EQ(req->tools[0].field, "tools[0].function.parameters");
  auto named = spec(R"(, "tool_choice": {"type": "function", "function": {"name": "b"}})");
  ASSERT_TRUE(named.has_value());
  EXPECT_EQ(named->mode, structured::ToolCallSpec::Mode::kNamed);
  ASSERT_EQ(named->tools.size(), 1u);
  EXPECT_EQ(named->tools[0].name, "b");
  // auto with a strict tool: only the strict tool's arguments follow its schema.
  auto aut = spec("");
  ASSERT_TRUE(aut.has_value());
  EXPECT_EQ(aut->mode, structured::ToolCallSpec::Mode::kAuto);
  EXPECT_FALSE(aut->tools[0].enforce);
  EXPECT_TRUE(aut->tools[1].enforce);
  // none: nothing rendered, nothing constrained.
  EXPECT_FALSE(spec(R"(, "tool_choice": "none")").has_value());
  // No strict tool under auto: no constraint.
  auto plain = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}],
      "tools": [{"type": "function", "function": {"name": "a"}}]})",
                                kTokens);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->tool_calls.has_value());
  EXPECT_FALSE(ToolCallConstraint(*plain, false).has_value());
  // The constraint carries whether the prompt left a reasoning block open.
  ChatRequest r;
  r.tool_calls = named;
  r.tool_calls_field = "tool_choice";
  auto c = ToolCallConstraint(r, true);
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->kind, structured::ConstraintSpec::Kind::kToolCalls);
  EXPECT_EQ(c->field, "tool_choice");
  auto back = structured::DecodeToolCallSpec(c->text);
  ASSERT_TRUE(back.ok());
  EXPECT_TRUE(back->reasoning);
  EXPECT_NE(c->Key(), ToolCallConstraint(r, false)->Key());
}

TEST(Chat, OutputParsing) {
  auto p = ParseChatOutput("<think>\nhmm</think>\n\nHello", false, false, "c_");
  ASSERT_TRUE(p.reasoning);
  EXPECT_EQ(*p.reasoning, "\nhmm");
  EXPECT_EQ(p.content, "Hello");
  p = ParseChatOutput("still thinking</think>done", true, false, "c_");
  EXPECT_EQ(*p.reasoning, "still thinking");
  EXPECT_EQ(p.content, "done");
  p = ParseChatOutput("no tags here", false, true, "c_");
  EXPECT_FALSE(p.reasoning);
  EXPECT_EQ(p.content, "no tags here");
  p = ParseChatOutput(
      "Let me look.\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"city\": \"Oslo\"}}\n"
      "</tool_call>\n<tool_call>{\"name\": \"t\", \"arguments\": {}}</tool_call>",
      false, true, "c_");
  EXPECT_EQ(p.content, "Let me look.");
  ASSERT_EQ(p.tool_calls.size(), 2u);
  EXPECT_EQ(p.tool_calls[0].name, "get");
  EXPECT_EQ(p.tool_calls[0].arguments, "{\"city\":\"Oslo\"}");
  EXPECT_EQ(p.tool_calls[0].id, "c_0");
  EXPECT_EQ(p.tool_calls[1].name, "t");
  p = ParseChatOutput("<tool_call>not json</tool_call>", false, true, "c_");
  EXPECT_TRUE(p.tool_calls.empty());
  EXPECT_EQ(p.content, "<tool_call>not json</tool_call>");
  EXPECT_TRUE(PromptOpensThinking("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(PromptOpensThinking("<think>\n\n</think>\n\n"));
}

// Streams `text` in pieces of `step` bytes; returns the concatenated reasoning and content
// deltas, the tool calls' names and the finish reason.
struct Streamed {
  std::string reasoning, content, finish;
  std::vector<std::string> calls;
  bool role_first = false, done = false;
};
Streamed Stream(const std::string& text, size_t step, bool thinking, bool tools) {
  ChatRequest req;
  req.tools_given = tools;
  req.include_usage = true;
  ChatContext ctx;
  ctx.id = "chatcmpl-test";
  ctx.thinking = thinking;
  ChatStream s(ctx, req);
  GenerateRequest r;
  r.outputs.resize(1);
  std::string events;
  for (size_t n = 0; n < text.size(); n += step) {
    r.outputs[0].text = text.substr(0, n);
    events += s.Update(r);
  }
  r.outputs[0].text = text;
  r.outputs[0].finish_reason = "stop";
  events += s.Update(r);
  events += s.Finish(r);
  Streamed out;
  simdjson::dom::parser p;
  size_t pos = 0, k = 0;
  while (pos < events.size()) {
    const size_t end = events.find("\n\n", pos);
    const std::string ev = events.substr(pos + 6, end - pos - 6);
    pos = end + 2;
    if (ev == "[DONE]") {
      out.done = true;
      continue;
    }
    simdjson::dom::element e = p.parse(ev);
    simdjson::dom::array choices = e["choices"].get_array();
    if (choices.size() == 0) continue;
    simdjson::dom::element d = choices.at(0)["delta"];
    std::string_view v;
    if (k++ == 0) out.role_first = !d["role"].get(v) && v == "assistant";
    if (!d["reasoning_content"].get(v)) out.reasoning += std::string(v);
    if (!d["content"].get(v)) out.content += std::string(v);
    simdjson::dom::array calls;
    if (!d["tool_calls"].get(calls)) {
      for (auto c : calls) out.calls.emplace_back(c["function"]["name"].get_string().value());
    }
    if (!choices.at(0)["finish_reason"].get(v)) out.finish = std::string(v);
  }
  return out;
}

TEST(Chat, StreamEqualsNonStreaming) {
  const struct {
    std::string text;
    bool thinking, tools;
  } cases[] = {
      {"<think>\nplan: caf\xc3\xa9 \xe2\x82\xac</think>\n\nThe answer is 42 \xf0\x9f\x98\x80.",
       false, false},
      {"reasoning goes on</think>content", true, false},
      {"plain answer, no tags <thin", false, false},
      {"<thinker> is not a tag", false, false},
      {"Checking.\n<tool_call>\n{\"name\": \"get\", \"arguments\": {\"q\": \"x\"}}\n"
       "</tool_call>",
       false, true},
      {"<think>x</think>\n<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
       "<tool_call>{\"name\": \"b\", \"arguments\": {\"n\": 2}}</tool_call>",
       false, true},
      {"text then <tool_call>broken", false, true},
      {"  spaced   content  ", false, true},
  };
  for (const auto& c : cases) {
    const ParsedChatOutput want = ParseChatOutput(c.text, c.thinking, c.tools, "id_");
    for (size_t step : {1, 2, 3, 5, 7, 64}) {
      const Streamed got = Stream(c.text, step, c.thinking, c.tools);
      EXPECT_TRUE(got.role_first && got.done) << c.text;
      EXPECT_EQ(got.reasoning, want.reasoning.value_or("")) << c.text << " step " << step;
      if (want.tool_calls.empty()) {
        EXPECT_EQ(got.content, want.content) << c.text << " step " << step;
        EXPECT_EQ(got.finish, "stop");
      } else {
        EXPECT_EQ(got.content, want.content) << c.text << " step " << step;
        ASSERT_EQ(got.calls.size(), want.tool_calls.size()) << c.text;
        for (size_t i = 0; i < got.calls.size(); ++i)
          EXPECT_EQ(got.calls[i], want.tool_calls[i].name);
        EXPECT_EQ(got.finish, "tool_calls");
      }
    }
  }
}

}  // namespace
}  // namespace sluice::io
