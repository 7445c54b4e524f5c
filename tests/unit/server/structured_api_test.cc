// The structured-output request fields of completions and chat: each form reaches the
// sampling parameters as one constraint; several constraints, bad shapes and stray whitespace
// patterns are refused naming the field.
#include <gtest/gtest.h>

#include "io/chat.h"
#include "io/completions.h"

namespace sluice::io {
namespace {

using structured::ConstraintSpec;

StatusOr<CompletionRequest> Parse(const std::string& extra) {
  return ParseCompletionRequest(R"({"prompt": [1, 2, 3])" + extra + "}", nullptr);
}

TEST(StructuredApi, EveryFormBecomesOneConstraint) {
  struct Case {
    const char* extra;
    ConstraintSpec::Kind kind;
    const char* field;
  } cases[] = {
      {R"(, "response_format": {"type": "json_object"})", ConstraintSpec::Kind::kJsonObject,
       "response_format"},
      {R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "n", "strict": true,
          "schema": {"type": "integer"}}})",
       ConstraintSpec::Kind::kJsonSchema, "response_format.json_schema.schema"},
      {R"(, "structured_outputs": {"json": {"type": "string"}})", ConstraintSpec::Kind::kJsonSchema,
       "structured_outputs.json"},
      {R"(, "structured_outputs": {"regex": "a+"})", ConstraintSpec::Kind::kRegex,
       "structured_outputs.regex"},
      {R"(, "structured_outputs": {"choice": ["a", "b"]})", ConstraintSpec::Kind::kChoice,
       "structured_outputs.choice"},
      {R"(, "structured_outputs": {"grammar": "root ::= \"x\""})", ConstraintSpec::Kind::kGrammar,
       "structured_outputs.grammar"},
      {R"(, "guided_json": "{\"type\": \"null\"}")", ConstraintSpec::Kind::kJsonSchema,
       "guided_json"},
      {R"(, "guided_regex": "[0-9]+")", ConstraintSpec::Kind::kRegex, "guided_regex"},
      {R"(, "guided_choice": ["x"])", ConstraintSpec::Kind::kChoice, "guided_choice"},
      {R"(, "guided_grammar": "root ::= \"y\"")", ConstraintSpec::Kind::kGrammar, "guided_grammar"},
  };
  for (const Case& c : cases) {
    auto r = Parse(c.extra);
    ASSERT_TRUE(r.ok()) << c.extra << ": " << r.status().message();
    ASSERT_TRUE(r->params.constraint.has_value()) << c.extra;
    EXPECT_EQ(r->params.constraint->kind, c.kind) << c.extra;
    EXPECT_EQ(r->params.constraint->field, c.field);
  }
  auto text = Parse(R"(, "response_format": {"type": "text"})");
  ASSERT_TRUE(text.ok());
  EXPECT_FALSE(text->params.constraint.has_value());
  auto ws = Parse(R"(, "guided_json": {"type": "object"}, "guided_whitespace_pattern": "[ ]?")");
  ASSERT_TRUE(ws.ok());
  EXPECT_EQ(ws->params.constraint->whitespace, "[ ]?");
  auto schema = Parse(R"(, "guided_json": {"type": "object", "properties": {"a": {}}})");
  EXPECT_EQ(schema->params.constraint->text, R"({"type":"object","properties":{"a":{}}})");
  ChatTokens toks;
  auto chat = ParseChatRequest(R"({"messages": [{"role": "user", "content": "x"}],
      "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"type": "boolean"}}}})",
                               toks);
  ASSERT_TRUE(chat.ok()) << chat.status().message();
  EXPECT_EQ(chat->params.constraint->text, R"({"type":"boolean"})");
}

TEST(StructuredApi, RefusalsNameTheField) {
  const std::pair<const char*, const char*> cases[] = {
      {R"(, "guided_json": {}, "guided_regex": "a")",
       "several structured-output constraints in one request (guided_json, guided_regex)"},
      {R"(, "response_format": {"type": "json_object"}, "structured_outputs": {"choice": ["a"]})",
       "(response_format, structured_outputs.choice)"},
      {R"(, "structured_outputs": {"regex": "a", "choice": ["a"]})", "several"},
      {R"(, "structured_outputs": {})", "\"structured_outputs\" needs one of"},
      {R"(, "structured_outputs": {"regex": "a", "backend": "x"})", "backend"},
      {R"(, "response_format": {"type": "json_schema"})", "response_format.json_schema"},
      {R"(, "response_format": {"type": "json_schema", "json_schema": {"name": "n"}})",
       "response_format.json_schema.schema"},
      {R"(, "response_format": {"type": "json_schema", "json_schema": {"schema": {}, "extra": 1}})",
       "extra"},
      {R"(, "response_format": {"type": "xml"})", "response_format.type"},
      {R"(, "guided_choice": [])", "guided_choice"},
      {R"(, "guided_choice": [1])", "guided_choice"},
      {R"(, "guided_regex": 5)", "guided_regex"},
      {R"(, "guided_regex": "a", "guided_whitespace_pattern": " ")",
       "\"guided_whitespace_pattern\" applies to JSON"},
      {R"(, "guided_whitespace_pattern": " ")", "guided_whitespace_pattern"},
      {R"(, "guided_decoding_backend": "xgrammar", "guided_regex": "a")",
       "guided_decoding_backend"},
  };
  for (const auto& [extra, needle] : cases) {
    auto r = Parse(extra);
    ASSERT_FALSE(r.ok()) << extra;
    EXPECT_NE(r.status().message().find(needle), std::string::npos)
        << extra << " -> " << r.status().message();
  }
}

}  // namespace
}  // namespace sluice::io
