// Tool-call constraints: the Hermes/Qwen call format around each function's arguments, per
// tool_choice mode (named: one call of that function; required: one or more; auto: free text
// then optional calls), strict schemas vs any JSON object, and a reasoning block closed first.
#include "structured/tool_calls.h"

#include "util.h"

namespace sluice::structured {
namespace {

using testing::Lang;
using testing::LangOf;

ToolCallTool Weather(bool enforce = true) {
  ToolCallTool t;
  t.name = "get_weather";
  t.parameters =
      R"({"type":"object","properties":{"city":{"type":"string","maxLength":8},)"
      R"("unit":{"enum":["c","f"]}},"required":["city","unit"],"additionalProperties":false})";
  t.enforce = enforce;
  t.field = "tools[0].function.parameters";
  return t;
}

ToolCallTool Time() {
  ToolCallTool t;
  t.name = "get_time";
  t.field = "tools[1].function.parameters";
  return t;  // no parameters: arguments {}
}

std::string Call(const std::string& name, const std::string& args) {
  return "<tool_call>\n{\"name\": \"" + name + "\", \"arguments\": " + args + "}\n</tool_call>";
}

// Any-object arguments (a tool that is not strict) are recursive JSON: a pushdown language.
std::shared_ptr<Lang> Compile(const ToolCallSpec& spec) {
  // Through the spec's text, as a request's constraint travels.
  auto decoded = DecodeToolCallSpec(EncodeToolCallSpec(spec));
  EXPECT_TRUE(decoded.ok()) << decoded.status().message();
  if (!decoded.ok()) return LangOf(Nothing());
  auto e = CompileToolCalls(*decoded, {});
  EXPECT_TRUE(e.ok()) << e.status().message();
  if (!e.ok()) return LangOf(Nothing());
  return LangOf(*e);
}

TEST(ToolCalls, NamedIsOneCallOfThatFunctionWithSchemaArguments) {
  ToolCallSpec spec;
  spec.mode = ToolCallSpec::Mode::kNamed;
  spec.tools = {Weather()};
  auto d = Compile(spec);
  EXPECT_TRUE(d->Matches(Call("get_weather", R"({"city":"Oslo","unit":"c"})")));
  EXPECT_FALSE(d->Matches(Call("get_weather", R"({"city":"Oslo"})")));  // unit required
  EXPECT_FALSE(d->Matches(Call("get_weather", R"({"city":"Oslo","unit":"k"})")));
  EXPECT_FALSE(d->Matches(Call("get_weather", R"({"city":"Copenhagen","unit":"c"})")));
  EXPECT_FALSE(d->Matches(Call("get_time", "{}")));
  EXPECT_FALSE(d->Matches("Sure. " + Call("get_weather", R"({"city":"Oslo","unit":"c"})")));
  EXPECT_FALSE(d->Matches(Call("get_weather", R"({"city":"a","unit":"c"})") + "\n" +
                          Call("get_weather", R"({"city":"b","unit":"c"})")));
}

TEST(ToolCalls, RequiredIsOneOrMoreCallsOfAnyTool) {
  ToolCallSpec spec;
  spec.mode = ToolCallSpec::Mode::kRequired;
  spec.tools = {Weather(), Time()};
  auto d = Compile(spec);
  const std::string w = Call("get_weather", R"({"city":"Oslo","unit":"f"})");
  EXPECT_TRUE(d->Matches(w));
  EXPECT_TRUE(d->Matches(Call("get_time", "{}")));
  EXPECT_TRUE(d->Matches(w + "\n" + Call("get_time", "{}")));
  EXPECT_FALSE(d->Matches(Call("get_time", R"({"x":1})")));  // no parameters: {}
  EXPECT_FALSE(d->Matches(""));
  EXPECT_FALSE(d->Matches("hello"));
  EXPECT_FALSE(d->Matches(Call("other", "{}")));
}

TEST(ToolCalls, AutoAllowsTextThenCallsAndOnlyStrictToolsFollowTheirSchema) {
  ToolCallSpec spec;
  spec.mode = ToolCallSpec::Mode::kAuto;
  ToolCallTool loose = Weather(false);
  loose.name = "search";
  spec.tools = {Weather(), loose};
  auto d = Compile(spec);
  EXPECT_TRUE(d->Matches(""));
  EXPECT_TRUE(d->Matches("It is sunny in Oslo."));
  EXPECT_TRUE(d->Matches("Let me check.\n" + Call("get_weather", R"({"city":"Oslo","unit":"c"})")));
  EXPECT_FALSE(d->Matches(Call("get_weather", R"({"city":"Oslo"})")));  // strict: the schema
  EXPECT_TRUE(d->Matches(Call("search", R"({"q":[1,{"a":null}]})")));   // not: any object
  EXPECT_FALSE(d->Matches(Call("search", "[1]")));
  EXPECT_FALSE(d->Matches("<tool_call>\n{\"name\": \"get_weather\"}"));  // a call must parse
  EXPECT_FALSE(d->Matches(Call("search", "{}") + " and more text"));
}

TEST(ToolCalls, ReasoningIsClosedBeforeTheCalls) {
  ToolCallSpec spec;
  spec.mode = ToolCallSpec::Mode::kNamed;
  spec.tools = {Time()};
  spec.reasoning = true;
  auto d = Compile(spec);
  EXPECT_TRUE(d->Matches("The user wants the time.</think>\n\n" + Call("get_time", "{}")));
  EXPECT_TRUE(d->Matches("</think>" + Call("get_time", "{}")));
  EXPECT_FALSE(d->Matches(Call("get_time", "{}")));
  EXPECT_FALSE(d->Matches("a</think>b</think>" + Call("get_time", "{}")));
}

TEST(ToolCalls, NamesAreQuotedAndUnsupportedSchemasNameTheTool) {
  ToolCallSpec spec;
  spec.mode = ToolCallSpec::Mode::kNamed;
  ToolCallTool t = Time();
  t.name = "say \"hi\"";
  spec.tools = {t};
  EXPECT_TRUE(Compile(spec)->Matches(Call("say \\\"hi\\\"", "{}")));
  t.parameters = R"({"type":"object","properties":{"a":{"not":{}}}})";
  spec.tools = {t};
  auto e = CompileToolCalls(spec, {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("tools[1].function.parameters"), std::string::npos)
      << e.status().message();
  EXPECT_NE(e.status().message().find("not"), std::string::npos) << e.status().message();
}

}  // namespace
}  // namespace sluice::structured
