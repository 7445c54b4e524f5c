// Chat-template engine: the API (parse once, render many; contexts built in C++ or from
// JSON), error reporting (line numbers, raise_exception's message) and the documented limits.
#include "chat/template.h"

#include <gtest/gtest.h>

#include <string>

namespace sluice::chat {
namespace {

StatusOr<std::string> Render(const std::string& src, const Value& ctx = Value::NewDict(),
                             const RenderOptions& opts = {}) {
  auto t = Template::Parse(src);
  if (!t.ok()) return t.status();
  return t->Render(ctx, opts);
}

TEST(ChatTemplate, ParseOnceRenderWithContextsBuiltInCpp) {
  auto t = Template::Parse(
      "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
      "{% if add_generation_prompt %}<|assistant|>{% endif %}");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  for (int turn = 0; turn < 3; ++turn) {
    Value messages = Value::NewList();
    Value m = Value::NewDict();
    m.Set("role", Value::Str("user")).Set("content", Value::Str("hi " + std::to_string(turn)));
    messages.Append(m);
    Value ctx = Value::NewDict();
    ctx.Set("messages", messages).Set("add_generation_prompt", Value::Bool(turn % 2 == 0));
    auto out = t->Render(ctx);
    ASSERT_TRUE(out.ok()) << out.status().ToString();
    EXPECT_EQ(*out,
              "<|user|>hi " + std::to_string(turn) + "\n" + (turn % 2 == 0 ? "<|assistant|>" : ""));
  }
}

TEST(ChatTemplate, ContextFromJsonKeepsTypesAndOrder) {
  auto ctx =
      ParseJson(R"({"d": {"z": 1, "a": 2.0, "s": "é", "n": null, "b": true, "l": [1, [2]]}})");
  ASSERT_TRUE(ctx.ok());
  auto out = Render("{{ d | tojson }} {{ d }}", *ctx);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(*out, R"({"z": 1, "a": 2.0, "s": "é", "n": null, "b": true, "l": [1, [2]]} )"
                  R"({'z': 1, 'a': 2.0, 's': 'é', 'n': None, 'b': True, 'l': [1, [2]]})");
}

TEST(ChatTemplate, SyntaxErrorNamesTheLine) {
  auto t = Template::Parse("line one\n{% if x %}\nthree\n{{ 1 + }}\n{% endif %}");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("line 4"), std::string::npos) << t.status().ToString();
  auto u = Template::Parse("a\n\n{% for x in y %}");
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("syntax error"), std::string::npos) << u.status().ToString();
}

TEST(ChatTemplate, RuntimeErrorNamesTheLineAndRaiseExceptionMessage) {
  auto out =
      Render("a\nb\n{% if true %}\n{{ raise_exception('Roles must alternate!') }}{% endif %}");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("line 4"), std::string::npos) << out.status().ToString();
  EXPECT_NE(out.status().message().find("Roles must alternate!"), std::string::npos);
  auto undef = Render("\n\n{{ messages[0].content.x.y }}");
  ASSERT_FALSE(undef.ok());
  EXPECT_NE(undef.status().message().find("line 3"), std::string::npos)
      << undef.status().ToString();
  auto macro = Render("{% macro f() %}\n{{ 1 / 0 }}\n{% endmacro %}\n{{ f() }}");
  ASSERT_FALSE(macro.ok());
  EXPECT_NE(macro.status().message().find("line 2"), std::string::npos)
      << macro.status().ToString();
}

TEST(ChatTemplate, StrftimeNowUsesTheInjectedClock) {
  RenderOptions opts;
  std::tm tm{};
  tm.tm_year = 125;
  tm.tm_mon = 0;
  tm.tm_mday = 2;
  opts.now = tm;
  auto out = Render("{{ strftime_now('%d %b %Y') }}", Value::NewDict(), opts);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(*out, "02 Jan 2025");
  auto live = Render("{{ strftime_now('%Y') | int > 2000 }}");
  ASSERT_TRUE(live.ok());
  EXPECT_EQ(*live, "True");
}

TEST(ChatTemplate, OutputLimit) {
  RenderOptions opts;
  opts.max_output_bytes = 1000;
  auto out =
      Render("{% for i in range(100) %}0123456789abcdef{% endfor %}", Value::NewDict(), opts);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("max_output_bytes"), std::string::npos);
  auto rep = Render("{{ 'x' * 100000 }}", Value::NewDict(), opts);
  ASSERT_FALSE(rep.ok());
  auto ok = Render("{% for i in range(10) %}0123456789{% endfor %}", Value::NewDict(), opts);
  ASSERT_TRUE(ok.ok());
}

TEST(ChatTemplate, LoopIterationLimit) {
  RenderOptions opts;
  opts.max_loop_iterations = 10000;
  auto out = Render("{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}",
                    Value::NewDict(), opts);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("max_loop_iterations"), std::string::npos);
}

TEST(ChatTemplate, RecursionIsBounded) {
  auto macro = Render("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
  ASSERT_FALSE(macro.ok());
  EXPECT_NE(macro.status().message().find("max_call_depth"), std::string::npos);
  // Deep nesting in the source is a syntax error, not a stack overflow.
  std::string deep_expr = "{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}";
  EXPECT_FALSE(Template::Parse(deep_expr).ok());
  std::string deep_not = "{{ " + std::string(0, ' ');
  for (int i = 0; i < 5000; ++i) deep_not += "not ";
  deep_not += "1 }}";
  EXPECT_FALSE(Template::Parse(deep_not).ok());
  std::string deep_if;
  for (int i = 0; i < 5000; ++i) deep_if += "{% if true %}";
  EXPECT_FALSE(Template::Parse(deep_if).ok());
  std::string deep_list = "{{ " + std::string(5000, '[') + std::string(5000, ']') + " }}";
  EXPECT_FALSE(Template::Parse(deep_list).ok());
  std::string deep_neg = "{{ " + std::string(5000, '-') + "1 }}";
  EXPECT_FALSE(Template::Parse(deep_neg).ok());
  std::string deep_filter = "{{ 1";
  for (int i = 0; i < 5000; ++i) deep_filter += "|abs";
  deep_filter += " }}";
  EXPECT_TRUE(Template::Parse(deep_filter).ok());  // a chain, not nesting
}

TEST(ChatTemplate, MutationThroughMethodsIsRefusedAsInTheSandbox) {
  auto out = Render("{% set l = [1] %}{{ l.append(2) }}");
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("unsafe"), std::string::npos);
}

TEST(ChatTemplate, ValueStringConversionsFollowPython) {
  EXPECT_EQ(FloatRepr(1.0), "1.0");
  EXPECT_EQ(FloatRepr(1e16), "1e+16");
  EXPECT_EQ(FloatRepr(1e15), "1000000000000000.0");
  EXPECT_EQ(FloatRepr(0.0001), "0.0001");
  EXPECT_EQ(FloatRepr(0.00001), "1e-05");
  EXPECT_EQ(FloatRepr(-0.0), "-0.0");
  EXPECT_EQ(FloatRepr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(PyStr(Value::Bool(true)), "True");
  EXPECT_EQ(PyStr(Value::None()), "None");
  EXPECT_EQ(PyRepr(Value::Str("it's")), "\"it's\"");
}

}  // namespace
}  // namespace sluice::chat
