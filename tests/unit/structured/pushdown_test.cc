// Recursive constraints: $ref cycles, recursive GBNF rules and free JSON values run on the
// pushdown automaton; masks stay exact across calls and returns inside one token; the depth
// limit fails loudly.
#include "structured/pushdown.h"

#include <gtest/gtest.h>

#include <random>

#include "structured/constraint.h"
#include "structured/grammar.h"
#include "structured/json_schema.h"
#include "structured/token_mask.h"
#include "tokenizer/tokenizer.h"
#include "util.h"

namespace sluice::structured {
namespace {

using testing::LangOf;

ExprP SchemaExpr(const std::string& s) {
  auto e = CompileJsonSchema(s, {});
  EXPECT_TRUE(e.ok()) << s << ": " << e.status().message();
  return e.ok() ? *e : Nothing();
}

std::string Nested(int depth, const std::string& leaf = "1") {
  std::string s;
  for (int i = 0; i < depth; ++i) s += i % 2 ? "[" : "{\"k\":";
  s += leaf;
  for (int i = depth - 1; i >= 0; --i) s += i % 2 ? "]" : "}";
  return s;
}

TEST(Pushdown, RecursiveRefTreeAndLinkedList) {
  auto tree = LangOf(SchemaExpr(R"({"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},
      "required":["v"],"additionalProperties":false})"));
  EXPECT_TRUE(tree->pushdown());
  EXPECT_TRUE(tree->Matches(R"({"v":1})"));
  EXPECT_TRUE(tree->Matches(R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})"));
  std::string deep = R"({"v":0})";
  for (int i = 1; i < 40; ++i) deep = R"({"v":)" + std::to_string(i) + R"(,"kids":[)" + deep + "]}";
  EXPECT_TRUE(tree->Matches(deep));
  EXPECT_FALSE(tree->Matches(R"({"v":1,"kids":[{"v":"x"}]})"));  // checked at every level
  EXPECT_FALSE(tree->Matches(R"({"v":1,"kids":[{"v":2,"kids":[{}]}]})"));
  EXPECT_FALSE(tree->Matches(R"({"v":1,"kids":[{"v":2}})"));  // unbalanced
  EXPECT_FALSE(tree->Matches(R"({"v":1,"kids":[{"v":2}]}])"));
  auto list = LangOf(SchemaExpr(R"({"$defs":{"node":{"type":"object","properties":{
      "value":{"type":"string"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
      "required":["value","next"],"additionalProperties":false}},"$ref":"#/$defs/node"})"));
  EXPECT_TRUE(list->Matches(R"({"value":"a","next":null})"));
  EXPECT_TRUE(
      list->Matches(R"({"value":"a","next":{"value":"b","next":{"value":"c","next":null}}})"));
  EXPECT_FALSE(list->Matches(R"({"value":"a","next":{"value":"b"}})"));
  EXPECT_FALSE(list->Matches(R"({"value":"a","next":{"value":1,"next":null}})"));
  // oneOf with a recursive branch: proved exclusive from the branch's type.
  auto one = LangOf(SchemaExpr(R"({"$defs":{"n":{"type":"object","properties":{
      "next":{"oneOf":[{"$ref":"#/$defs/n"},{"type":"null"}]}},"required":["next"],
      "additionalProperties":false}},"$ref":"#/$defs/n"})"));
  EXPECT_TRUE(one->Matches(R"({"next":{"next":null}})"));
  EXPECT_FALSE(one->Matches(R"({"next":{"next":1}})"));
  // A reference to itself before any value is read is refused.
  auto left = CompileJsonSchema(R"({"$defs":{"a":{"anyOf":[{"$ref":"#/$defs/a"},{"type":"null"}]}},
      "$ref":"#/$defs/a"})",
                                {});
  if (left.ok()) {  // refused when the automaton is built
    auto nfa = BuildNfa(*left, {}, true);
    ASSERT_TRUE(nfa.ok());
    EXPECT_FALSE(Pda::CheckLeftRecursion(**nfa).ok());
  }
}

TEST(Pushdown, RecursiveGbnfArithmetic) {
  auto e = CompileGrammar(R"g(root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor
)g");
  ASSERT_TRUE(e.ok()) << e.status().message();
  auto g = LangOf(*e);
  EXPECT_TRUE(g->pushdown());
  for (const char* ok : {"1", "1+2*3", "(1+2)*3", "((((7))))", "-(-3)*(2+(4/5))"})
    EXPECT_TRUE(g->Matches(ok)) << ok;
  for (const char* bad : {"", "(1+2", "1+", "(1))", "()", "1+*2"})
    EXPECT_FALSE(g->Matches(bad)) << bad;
  // Right recursion is a tail call: it repeats past the depth limit without nesting.
  auto right = CompileGrammar("root ::= \"x\" root | \"y\"\n");
  ASSERT_TRUE(right.ok());
  auto r = LangOf(*right);
  EXPECT_TRUE(r->Matches(std::string(1000, 'x') + "y"));
  EXPECT_FALSE(r->Matches(std::string(1000, 'x')));
  // Left recursion would grow the stack without input: refused when the automaton is built.
  auto left = CompileGrammar("root ::= root \"+\" \"1\" | \"1\"\n");
  ASSERT_TRUE(left.ok());
  auto nfa = BuildNfa(*left, {}, true);
  ASSERT_TRUE(nfa.ok());
  Status st = Pda::CheckLeftRecursion(**nfa);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("left recursion"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("root -> root"), std::string::npos) << st.message();
  auto trie = TokenTrie::Build({"1", "+"}, 4, {3});
  auto gr = Grammar::Create(*left, trie);
  ASSERT_FALSE(gr.ok());
  EXPECT_NE(gr.status().message().find("left recursion"), std::string::npos);
}

TEST(Pushdown, FreeValuesNestToTheLimitThenFail) {
  auto any = LangOf(SchemaExpr("{}"));
  EXPECT_TRUE(any->Matches(Nested(10)));
  // The outermost container is inline; the 128 below it are calls.
  EXPECT_TRUE(any->Matches(Nested(kMaxRecursionDepth + 1)));
  EXPECT_FALSE(any->Matches(Nested(kMaxRecursionDepth + 2)));
  EXPECT_FALSE(any->Matches(Nested(10).substr(1)));
  auto obj = LangOf(JsonObjectExpr({}));
  EXPECT_TRUE(obj->Matches(R"({"a":{"b":[{"c":[[[{"d":null}]]]}]}})"));
  EXPECT_FALSE(obj->Matches("[1]"));
  // Generation: past the limit the request fails with an error, never a silent cut.
  std::vector<std::optional<std::string>> toks = {"{\"k\":", "[", "1", "]", "}", "<eos>"};
  auto trie = TokenTrie::Build(toks, 8, {5});
  auto g = Grammar::Create(SchemaExpr("{}"), trie);
  ASSERT_TRUE(g.ok());
  std::vector<uint32_t> m(static_cast<size_t>(trie->words()));
  int32_t s = (*g)->start();
  for (int d = 0; d <= kMaxRecursionDepth; ++d) {
    ASSERT_TRUE((*g)->FillMask(s, m.data()).ok()) << d;
    s = (*g)->Advance(s, d % 2 ? 1 : 0);
    ASSERT_GE(s, 0) << d;
  }
  Status st = (*g)->FillMask(s, m.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("128 levels deep"), std::string::npos) << st.message();
}

bool Allowed(const std::vector<uint32_t>& m, int id) {
  return (m[static_cast<size_t>(id) / 32] >> (id % 32)) & 1;
}

TEST(Pushdown, TokensCrossSeveralReturns) {
  // ids: 0 `{"a":`, 1 `[`, 2 `1`, 3 `]}`, 4 `}]}`, 5 `]}]}`, 6 `,`, 7 eos
  std::vector<std::optional<std::string>> toks = {"{\"a\":", "[",    "1", "]}",
                                                  "}]}",     "]}]}", ",", "<eos>"};
  auto trie = TokenTrie::Build(toks, 8, {7});
  auto g = Grammar::Create(SchemaExpr(R"({"$defs":{"t":{"type":"object","properties":{
      "a":{"type":"array","items":{"anyOf":[{"$ref":"#/$defs/t"},{"type":"integer"}]}}},
      "required":["a"],"additionalProperties":false}},"$ref":"#/$defs/t"})"),
                           trie);
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_TRUE((*g)->pushdown());
  std::vector<uint32_t> m(static_cast<size_t>(trie->words()));
  int32_t s = (*g)->start();
  for (int t : {0, 1, 0, 1, 0, 1, 2}) s = (*g)->Advance(s, t);  // {"a":[{"a":[{"a":[1
  ASSERT_GE(s, 0);
  ASSERT_TRUE((*g)->FillMask(s, m.data()).ok());
  EXPECT_TRUE(Allowed(m, 3));   // ]}      one return
  EXPECT_FALSE(Allowed(m, 4));  // }]}     a } needs a ] first
  EXPECT_TRUE(Allowed(m, 5));   // ]}]}    two returns in one token
  EXPECT_TRUE(Allowed(m, 6));
  EXPECT_FALSE(Allowed(m, 7));
  s = (*g)->Advance(s, 5);
  ASSERT_TRUE((*g)->FillMask(s, m.data()).ok());
  EXPECT_TRUE(Allowed(m, 3));   // closes the outermost
  EXPECT_FALSE(Allowed(m, 5));  // one level too many
  EXPECT_FALSE(Allowed(m, 7));
  s = (*g)->Advance(s, 3);
  EXPECT_TRUE((*g)->Finished(s));
}

TEST(Pushdown, MaskEqualsBruteForceOnRandomStates) {
  auto tok = Tokenizer::FromDirectory(std::string(SLUICE_FIXTURES_DIR) + "/../../models/demo-chat");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  const int vocab = static_cast<int>((*tok)->vocab_size()) + 1;
  auto trie = TokenTrie::FromTokenizer(**tok, vocab, {vocab - 1});
  ASSERT_TRUE(trie.ok());
  const std::vector<ExprP> langs = {
      SchemaExpr(R"({"type":"object","properties":{"v":{"type":"integer"},
          "kids":{"type":"array","items":{"$ref":"#"}}},"required":["v"],"additionalProperties":false})"),
      SchemaExpr("{}"), JsonObjectExpr({}),
      *CompileGrammar("root ::= e\ne ::= [0-9]+ | \"(\" e (\"+\" e)* \")\" | \"[\" e* \"]\"\n")};
  std::mt19937 rng(7);
  int checked = 0;
  for (const ExprP& e : langs) {
    auto g = Grammar::Create(e, *trie);
    ASSERT_TRUE(g.ok()) << g.status().message();
    ASSERT_TRUE((*g)->pushdown());
    std::vector<uint32_t> m(static_cast<size_t>((*trie)->words()));
    for (int walk = 0; walk < 6; ++walk) {
      int32_t s = (*g)->start();
      for (int step = 0; step < 40 && s >= 0; ++step) {
        ASSERT_TRUE((*g)->FillMask(s, m.data()).ok());
        std::vector<int> allowed;
        for (int id = 0; id < vocab; ++id) {
          const std::string* b = (*trie)->bytes(id);
          bool ok = b && !b->empty() && (*g)->Run(s, *b) >= 0;
          if ((*trie)->IsEos(id)) ok = (*g)->Accepting(s);
          ASSERT_EQ(Allowed(m, id), ok) << "token " << id << " at step " << step;
          if (ok && !(*trie)->IsEos(id)) allowed.push_back(id);
        }
        ++checked;
        if (allowed.empty()) break;
        // Prefer opening tokens half the time, so that walks get deep.
        int pick = allowed[rng() % allowed.size()];
        if (rng() % 2) {
          for (int id : allowed) {
            const std::string& b = *(*trie)->bytes(id);
            if (b.find_first_of("[{(") != std::string::npos && rng() % 3 == 0) pick = id;
          }
        }
        s = (*g)->Advance(s, pick);
      }
    }
  }
  EXPECT_GE(checked, 200);
}

}  // namespace
}  // namespace sluice::structured
