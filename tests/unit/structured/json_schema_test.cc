#include "structured/json_schema.h"

#include <gtest/gtest.h>

#include "structured/regex.h"
#include "util.h"

namespace sluice::structured {
namespace {

using testing::LangOf;

std::shared_ptr<testing::Lang> Schema(const std::string& s, ExprP ws = nullptr) {
  JsonOptions o;
  o.ws = ws;
  auto e = CompileJsonSchema(s, o);
  EXPECT_TRUE(e.ok()) << s << ": " << e.status().message();
  if (!e.ok()) return LangOf(Nothing());
  return LangOf(*e);
}

std::string Refusal(const std::string& s) {
  auto e = CompileJsonSchema(s, {});
  EXPECT_FALSE(e.ok()) << s;
  return e.ok() ? "" : e.status().message();
}

TEST(JsonSchema, ObjectsInSchemaOrderWithOptionalAndExtraMembers) {
  auto d = Schema(R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},
                      "required":["b"],"additionalProperties":false})");
  EXPECT_TRUE(d->Matches(R"({"a":1,"b":"x"})"));
  EXPECT_TRUE(d->Matches(R"({"b":"x"})"));
  EXPECT_FALSE(d->Matches(R"({"a":1})"));          // b required
  EXPECT_FALSE(d->Matches(R"({"b":"x","a":1})"));  // schema order
  EXPECT_FALSE(d->Matches(R"({"a":1,"b":"x","c":2})"));
  EXPECT_FALSE(d->Matches(R"({"a":1.5,"b":"x"})"));
  auto open = Schema(R"({"properties":{"a":{"type":"integer"}}})");
  EXPECT_TRUE(open->Matches(R"({"a":1,"c":[1,{"d":null}]})"));  // additionalProperties default
  EXPECT_FALSE(open->Matches(R"({"a":1,"a":2})"));              // a declared key is not extra
  EXPECT_FALSE(open->Matches(R"({"c":1,"a":"x"})"));
  EXPECT_TRUE(open->Matches(R"({"ab":"x"})"));
  auto typed = Schema(R"({"type":"object","additionalProperties":{"type":"boolean"}})");
  EXPECT_TRUE(typed->Matches(R"({"x":true,"y":false})"));
  EXPECT_FALSE(typed->Matches(R"({"x":1})"));
  auto counted = Schema(R"({"type":"object","minProperties":1,"maxProperties":2})");
  EXPECT_FALSE(counted->Matches("{}"));
  EXPECT_TRUE(counted->Matches(R"({"a":1,"b":2})"));
  EXPECT_FALSE(counted->Matches(R"({"a":1,"b":2,"c":3})"));
}

TEST(JsonSchema, StringsLengthsPatternsFormats) {
  auto d = Schema(R"({"type":"string","minLength":2,"maxLength":3})");
  EXPECT_TRUE(d->Matches(R"("ab")"));
  EXPECT_TRUE(d->Matches("\"\xc3\xa9\xc3\xa9\xc3\xa9\""));  // characters, not bytes
  EXPECT_TRUE(d->Matches(R"("a\n")"));                      // an escape is one character
  EXPECT_FALSE(d->Matches(R"("a")"));
  EXPECT_FALSE(d->Matches(R"("abcd")"));
  auto p = Schema(R"({"type":"string","pattern":"^[a-z]+\\d$","maxLength":3})");
  EXPECT_TRUE(p->Matches(R"("ab1")"));
  EXPECT_FALSE(p->Matches(R"("abc1")"));
  EXPECT_FALSE(p->Matches(R"("ab")"));
  auto q = Schema(R"({"type":"string","pattern":"\""})");  // a quote: spelled \" in JSON
  EXPECT_TRUE(q->Matches(R"("say \"hi\"")"));
  EXPECT_FALSE(q->Matches(R"("say hi")"));
  auto dt = Schema(R"({"type":"string","format":"date-time"})");
  EXPECT_TRUE(dt->Matches(R"("2024-02-29T13:45:00Z")"));
  EXPECT_TRUE(dt->Matches(R"("2024-02-29T13:45:00.123+05:30")"));
  EXPECT_FALSE(dt->Matches(R"("2024-13-01T00:00:00Z")"));
  auto date = Schema(R"({"type":"string","format":"date"})");
  for (const char* ok :
       {R"("2024-02-29")", R"("2000-02-29")", R"("0001-01-31")", R"("2023-04-30")"}) {
    EXPECT_TRUE(date->Matches(ok)) << ok;
  }
  for (const char* bad : {R"("2023-02-29")", R"("2100-02-29")", R"("0000-01-01")",
                          R"("2023-04-31")", R"("2023-06-31")", R"("2023-1-01")"}) {
    EXPECT_FALSE(date->Matches(bad)) << bad;
  }
  auto ip = Schema(R"({"format":"ipv4"})");
  EXPECT_TRUE(ip->Matches(R"("192.168.0.255")"));
  EXPECT_FALSE(ip->Matches(R"("256.1.1.1")"));
  EXPECT_TRUE(ip->Matches("3"));  // format only constrains strings
  auto v6 = Schema(R"({"type":"string","format":"ipv6"})");
  EXPECT_TRUE(v6->Matches(R"("::1")"));
  EXPECT_TRUE(v6->Matches(R"("2001:db8::8a2e:370:7334")"));
  EXPECT_FALSE(v6->Matches(R"("2001:db8:::1")"));
  auto u = Schema(R"({"type":"string","format":"uuid"})");
  EXPECT_TRUE(u->Matches(R"("123e4567-e89b-12d3-a456-426614174000")"));
  EXPECT_FALSE(u->Matches(R"("123e4567")"));
}

// A pattern and a length bound together: no prefix leads where neither can finish. Here
// "@ab" needs "/" and one more letter (5 characters) where maxLength allows 4, so "@ab" and
// everything after it is dead -- including the start of the escape "\/" (a random-weight
// model sampled that backslash and found no allowed token after it).
TEST(JsonSchema, PatternWithMaxLengthHasNoDeadEnds) {
  auto d = Schema(R"({"type":"string","pattern":"^@[a-z]+/[a-z]$","maxLength":4})");
  EXPECT_TRUE(d->Matches(R"("@a/b")"));
  EXPECT_TRUE(d->Matches(R"("@a\/b")"));  // the escaped solidus is one character
  EXPECT_TRUE(d->Continues(R"("@a\)"));
  EXPECT_FALSE(d->Continues(R"("@ab)"));
  EXPECT_FALSE(d->Continues(R"("@ab\)"));
  EXPECT_FALSE(d->Continues(R"("@ab/)"));
  EXPECT_FALSE(d->Matches(R"("@ab/c")"));
}

TEST(JsonSchema, NumbersAndBounds) {
  auto i = Schema(R"({"type":"integer","minimum":-5,"exclusiveMaximum":120})");
  for (const char* ok : {"-5", "0", "7", "99", "119"}) EXPECT_TRUE(i->Matches(ok)) << ok;
  for (const char* bad : {"-6", "120", "1000", "01", "1.0", "-0x"})
    EXPECT_FALSE(i->Matches(bad)) << bad;
  auto n = Schema(R"({"type":"number","exclusiveMinimum":0,"maximum":10})");
  for (const char* ok : {"0.5", "10", "10.000", "3", "9.99"}) EXPECT_TRUE(n->Matches(ok)) << ok;
  for (const char* bad : {"0", "-0.5", "10.01", "11", "0.0"}) EXPECT_FALSE(n->Matches(bad)) << bad;
  auto neg = Schema(R"({"type":"number","minimum":-2.0,"maximum":-1})");
  for (const char* ok : {"-2", "-1.5", "-1", "-1.0"}) EXPECT_TRUE(neg->Matches(ok)) << ok;
  for (const char* bad : {"-2.5", "-0.5", "0", "1"}) EXPECT_FALSE(neg->Matches(bad)) << bad;
  auto any = Schema(R"({"type":"number"})");
  EXPECT_TRUE(any->Matches("-1.5e+10"));
  EXPECT_FALSE(any->Matches("1."));
  auto big = Schema(R"({"type":"integer","minimum":1000000})");
  EXPECT_TRUE(big->Matches("1000000"));
  EXPECT_TRUE(big->Matches("123456789012345678901234"));
  EXPECT_FALSE(big->Matches("999999"));
}

TEST(JsonSchema, ArraysEnumsCombinators) {
  auto a = Schema(R"({"type":"array","prefixItems":[{"type":"string"}],"items":{"type":"integer"},
                      "minItems":2,"maxItems":3})");
  EXPECT_TRUE(a->Matches(R"(["a",1])"));
  EXPECT_TRUE(a->Matches(R"(["a",1,2])"));
  EXPECT_FALSE(a->Matches(R"(["a"])"));
  EXPECT_FALSE(a->Matches(R"(["a",1,2,3])"));
  EXPECT_FALSE(a->Matches(R"([1,1])"));
  auto e = Schema(R"({"enum":["red",1,null,{"k":[1]}],"type":["string","object"]})");
  EXPECT_TRUE(e->Matches(R"("red")"));
  EXPECT_TRUE(e->Matches(R"({"k":[1]})"));
  EXPECT_FALSE(e->Matches("1"));  // not of the types
  auto any_of = Schema(R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})");
  EXPECT_TRUE(any_of->Matches("5"));
  EXPECT_TRUE(any_of->Matches(R"("x")"));
  EXPECT_FALSE(any_of->Matches(R"("xy")"));
  auto one_of = Schema(R"({"oneOf":[{"type":"integer"},{"type":"string"}]})");
  EXPECT_TRUE(one_of->Matches("5"));
  auto all_of = Schema(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},
                                    {"properties":{"b":{"const":true}},"additionalProperties":false}]})");
  EXPECT_FALSE(all_of->Matches(R"({"a":1,"b":true})"));  // a is extra for the second branch
  auto merged = Schema(R"({"allOf":[{"properties":{"a":{"type":"integer"}},"required":["a"]},
                                    {"properties":{"a":{"minimum":3},"b":{"const":true}}}]})");
  EXPECT_TRUE(merged->Matches(R"({"a":3,"b":true})"));
  EXPECT_FALSE(merged->Matches(R"({"a":2})"));
  auto refs = Schema(R"({"$defs":{"p":{"type":"object","properties":{"x":{"$ref":"#/$defs/n"}},
                       "required":["x"],"additionalProperties":false},"n":{"type":"number"}},
                       "type":"array","items":{"$ref":"#/$defs/p"}})");
  EXPECT_TRUE(refs->Matches(R"([{"x":1},{"x":2.5}])"));
  EXPECT_FALSE(refs->Matches(R"([{"x":"1"}])"));
}

// Drafts 3-7 ignore the keywords beside "$ref" (the reference replaces the object); 2019-09
// and later (and schemas without "$schema") apply them beside it. Found on the corpus
// (Github_hard o38538, draft-07: {"$ref": ..., "additionalProperties": false}).
TEST(JsonSchema, KeywordsBesideRefFollowTheDraft) {
  const std::string body =
      R"("$defs":{"f":{"type":"object","properties":{"cache":{"type":"boolean"}}}},
      "type":"object","properties":{"o":{"$ref":"#/$defs/f","additionalProperties":false,
      "maxProperties":0}},"required":["o"],"additionalProperties":false})";
  auto d7 = Schema(R"({"$schema":"http://json-schema.org/draft-07/schema#",)" + body);
  EXPECT_TRUE(d7->Matches(R"({"o":{"cache":true}})"));  // siblings ignored
  EXPECT_TRUE(d7->Matches(R"({"o":{"cache":true,"x":1}})"));
  EXPECT_FALSE(d7->Matches(R"({"o":{"cache":1}})"));  // the reference still applies
  auto d4 = Schema(R"({"$schema":"http://json-schema.org/draft-04/schema#",)" + body);
  EXPECT_TRUE(d4->Matches(R"({"o":{"cache":true}})"));
  for (const std::string& head :
       {std::string("{"),
        std::string(R"({"$schema":"https://json-schema.org/draft/2020-12/schema",)")}) {
    auto d = Schema(head + body);
    EXPECT_TRUE(d->Matches(R"({"o":{}})"));
    EXPECT_FALSE(d->Matches(R"({"o":{"cache":true}})"));  // siblings apply: nothing allowed
  }
}

TEST(JsonSchema, WhitespacePolicy) {
  auto ws = ParseRegex("[ \\n]{0,2}", RegexMode::kFullMatch);
  auto d = Schema(R"({"type":"object","properties":{"a":{"type":"array"}},"required":["a"],
                      "additionalProperties":false})",
                  *ws);
  EXPECT_TRUE(d->Matches(R"({"a":[]})"));
  EXPECT_TRUE(d->Matches("{ \"a\" : [ 1 , 2 ] }"));
  EXPECT_FALSE(d->Matches("{   \"a\":[]}"));
  auto compact = Schema(R"({"type":"array"})");
  EXPECT_FALSE(compact->Matches("[ ]"));
}

TEST(JsonSchema, RefusesWhatItCannotEnforce) {
  EXPECT_NE(Refusal(R"({"properties":{"a":{"not":{"type":"string"}}}})").find("/properties/a/not"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"string","format":"hostname"})").find("format \"hostname\""),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"array","uniqueItems":true})").find("uniqueItems"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"$defs":{"t":{"properties":{"c":{"$ref":"#/$defs/t","minProperties":1}}}},
                        "$ref":"#/$defs/t"})")
                .find("recursive $ref \"#/$defs/t\" beside keyword \"minProperties\""),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"oneOf":[{"type":"number"},{"type":"integer"}]})").find("oneOf"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"number","multipleOf":0.5})").find("multipleOf"), std::string::npos);
  EXPECT_NE(Refusal(R"j({"type":"string","pattern":"(?=a)"})j").find("/pattern: regex: lookahead"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"$ref":"http://x/y.json"})").find("only local references"),
            std::string::npos);
  EXPECT_NE(Refusal(R"({"type":"number","minimum":0.5})").find("non-integral"), std::string::npos);
  EXPECT_NE(Refusal(R"({"if":{"type":"string"},"then":{"minLength":1}})").find("\"if\""),
            std::string::npos);
  EXPECT_NE(Refusal("{").find("not valid JSON"), std::string::npos);
}

TEST(JsonSchema, CanonicalSerialisation) {
  EXPECT_EQ(*CanonicalJson(R"({ "b" : [1.0, 2.5, -0.0001, "é\n\u0001"], "a": true })"),
            "{\"b\":[1,2.5,-0.0001,\"\xc3\xa9\\n\\u0001\"],\"a\":true}");
  auto obj = LangOf(JsonObjectExpr({}));
  EXPECT_TRUE(obj->Matches(R"({"a":{"b":[1,"x",null]}})"));
  EXPECT_FALSE(obj->Matches("[1]"));
  EXPECT_FALSE(obj->Matches(R"("x")"));
}

}  // namespace
}  // namespace sluice::structured

namespace sluice::structured {
namespace {

TEST(JsonSchema, PatternPropertiesWithOtherKeys) {
  auto d = testing::LangOf(*CompileJsonSchema(
      R"({"type":"object","properties":{"id":{"type":"integer"}},"patternProperties":{"^x-":{"type":"string"}},
          "additionalProperties":{"type":"boolean"}})",
      {}));
  EXPECT_TRUE(d->Matches(R"({"id":1,"x-a":"s","b":true})"));
  EXPECT_FALSE(d->Matches(R"({"x-a":true})"));  // a pattern key takes the pattern's schema
  EXPECT_FALSE(d->Matches(R"({"b":"s"})"));     // other keys take additionalProperties
  EXPECT_FALSE(d->Matches(R"({"id":"s"})"));
  auto closed = testing::LangOf(*CompileJsonSchema(
      R"({"patternProperties":{"^[0-9]+$":{"type":"null"}},"additionalProperties":false,"type":"object"})",
      {}));
  EXPECT_TRUE(closed->Matches(R"({"12":null})"));
  EXPECT_FALSE(closed->Matches(R"({"a":null})"));
}

}  // namespace
}  // namespace sluice::structured

namespace sluice::structured {
namespace {

TEST(JsonSchema, OneOfOverObjectsNeedsADiscriminator) {
  // Both branches accept {"id":"x","win":{},"lose":{}} (their key orders differ, so their
  // automata do not intersect): refused, never accepted as exclusive.
  auto e = CompileJsonSchema(R"({"type":"object","oneOf":[
      {"required":["id","win"],"properties":{"id":{"type":"string"}}},
      {"required":["id","lose"],"properties":{"id":{"type":"string"},"lose":{"type":"object"}}}]})",
                             {});
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("both admit objects"), std::string::npos)
      << e.status().message();
  auto tagged = CompileJsonSchema(
      R"({"$defs":{"a":{"type":"object","properties":{"kind":{"const":"a"},"x":{"type":"integer"}},
      "required":["kind"]}},"oneOf":[{"$ref":"#/$defs/a"},
      {"type":"object","properties":{"kind":{"enum":["b","c"]}},"required":["kind"]},{"type":"integer"}]})",
      {});
  ASSERT_TRUE(tagged.ok()) << std::string(tagged.status().message());
  auto d = testing::LangOf(*tagged);
  EXPECT_TRUE(d->Matches(R"({"kind":"a","x":1})"));
  EXPECT_TRUE(d->Matches(R"({"kind":"c"})"));
  EXPECT_TRUE(d->Matches("7"));
  EXPECT_FALSE(d->Matches(R"({"kind":"d"})"));
  auto arrays =
      CompileJsonSchema(R"({"oneOf":[{"type":"array"},{"type":"array","maxItems":1}]})", {});
  ASSERT_FALSE(arrays.ok());
  EXPECT_NE(arrays.status().message().find("both admit arrays"), std::string::npos);
}

}  // namespace
}  // namespace sluice::structured
