#include "structured/token_mask.h"

#include <gtest/gtest.h>

#include "structured/constraint.h"
#include "structured/grammar.h"
#include "structured/regex.h"
#include "tokenizer/tokenizer.h"

namespace sluice::structured {
namespace {

bool Allowed(const std::vector<uint32_t>& m, int id) {
  return (m[static_cast<size_t>(id) / 32] >> (id % 32)) & 1;
}

TEST(TokenMask, MaskFollowsTheAutomatonAndEosOnlyWhenAccepting) {
  // ids: 0 "a", 1 "b", 2 "ab", 3 "abc", 4 "\xc3" (half a character), 5 "\xa9", 6 eos, 7 special
  std::vector<std::optional<std::string>> toks = {"a",    "b",    "ab",    "abc",
                                                  "\xc3", "\xa9", "<eos>", std::nullopt};
  auto trie = TokenTrie::Build(toks, 40, {6});
  EXPECT_EQ(trie->vocab_size(), 40);
  auto re = ParseRegex("(ab)+\xc3\xa9?", RegexMode::kFullMatch);
  auto g = Grammar::Create(*re, trie);
  ASSERT_TRUE(g.ok());
  std::vector<uint32_t> m(static_cast<size_t>(trie->words()));
  ASSERT_TRUE((*g)->FillMask((*g)->start(), m.data()).ok());
  EXPECT_TRUE(Allowed(m, 0));
  EXPECT_TRUE(Allowed(m, 2));
  EXPECT_FALSE(Allowed(m, 1));
  EXPECT_FALSE(Allowed(m, 3));
  EXPECT_FALSE(Allowed(m, 6));  // not accepting yet
  EXPECT_FALSE(Allowed(m, 7));
  EXPECT_FALSE(Allowed(m, 39));
  int32_t s = (*g)->Advance((*g)->start(), 2);
  ASSERT_GE(s, 0);
  ASSERT_TRUE((*g)->FillMask(s, m.data()).ok());
  EXPECT_TRUE(Allowed(m, 6));  // accepting
  EXPECT_TRUE(Allowed(m, 4));  // the first byte of é (tokens may split characters)
  EXPECT_FALSE(Allowed(m, 5));
  EXPECT_TRUE(Allowed(m, 0));
  s = (*g)->Advance(s, 4);
  ASSERT_TRUE((*g)->FillMask(s, m.data()).ok());
  EXPECT_TRUE(Allowed(m, 5));
  EXPECT_FALSE(Allowed(m, 6));
  s = (*g)->Advance(s, 5);
  EXPECT_TRUE((*g)->Finished(s));
  EXPECT_EQ((*g)->Advance(s, 0), Grammar::kDead);
  EXPECT_EQ((*g)->Advance((*g)->start(), 6), Grammar::kDead);  // eos is not a byte string
}

TEST(TokenMask, ReachWithinLeavesOutTheLongestTokens) {
  // 600 tokens "a" x 1..600 plus "a\"" variants: their prefix of bytes in {a} is their length;
  // the 512 longest are the exceptions, so the reach of the rest is 600 - 512 = 88.
  std::vector<std::optional<std::string>> toks;
  for (int n = 1; n <= 600; ++n) toks.push_back(std::string(static_cast<size_t>(n), 'a'));
  toks.push_back("aaa\"aaaaaaaaaaaaaaaaaaaa");  // the quote ends its run at 3
  toks.push_back("\"aaaaaaaaaaaaaaaaa");        // 0
  auto trie = TokenTrie::Build(toks, 1000, {});
  TokenTrie::ByteSet a{};
  a['a' / 64] |= 1ull << ('a' % 64);
  auto r = trie->ReachWithin(a);
  EXPECT_EQ(r->depth, 600u - TokenTrie::kMaxReachExceptions);
  ASSERT_EQ(r->longer.size(), TokenTrie::kMaxReachExceptions);
  for (int32_t id : r->longer) EXPECT_GT(trie->bytes(id)->size(), r->depth) << id;
  EXPECT_EQ(trie->ReachWithin(a), r);  // kept per set
  TokenTrie::ByteSet all{};
  for (auto& w : all) w = ~0ull;
  EXPECT_EQ(trie->ReachWithin(all)->depth, 600u - TokenTrie::kMaxReachExceptions);
}

TEST(TokenMask, CountedStringMasksWithLongTokensMatchTheReference) {
  // The exceptions (tokens longer than the reach) are decided from each position's own state:
  // near maxLength a long run of "a" must be refused even though the shared mask allows it.
  std::vector<std::optional<std::string>> toks = {"\"", "\",", "a\"", "<eos>"};
  for (int n = 1; n <= 700; ++n) toks.push_back(std::string(static_cast<size_t>(n), 'a'));
  auto trie = TokenTrie::Build(toks, 1024, {3});
  auto re = ParseRegex("\"a{0,800}\"", RegexMode::kFullMatch);
  ASSERT_TRUE(re.ok());
  auto g = Grammar::Create(*re, trie);
  ASSERT_TRUE(g.ok());
  std::vector<uint32_t> m(static_cast<size_t>(trie->words())), ref(m.size());
  int32_t s = (*g)->Advance((*g)->start(), 0);
  for (int pos = 0; pos < 800 && s >= 0; ++pos) {
    ASSERT_TRUE((*g)->FillMask(s, m.data()).ok());
    ASSERT_TRUE((*g)->ReferenceMask(s, ref.data()).ok());
    ASSERT_EQ(m, ref) << "position " << pos;
    // 650 a's fit at position 0..150 only.
    EXPECT_EQ(Allowed(m, 4 + 649), pos <= 150) << pos;
    s = (*g)->Advance(s, 4);  // one "a"
  }
  // Reach 188 (700 runs of "a", the 512 longest left out): positions 1-611 share one mask, the
  // last 189 are walked each (800 walks without the sharing).
  EXPECT_LT((*g)->MaskWalks(), 200u);
}

TEST(TokenMask, GrammarCacheBoundsItsBytesOverAllGrammars) {
  // A 4,096-token vocabulary: one cached mask is 512 bytes.
  std::vector<std::optional<std::string>> toks;
  for (int i = 0; i < 4095; ++i)
    toks.push_back(std::string(1, static_cast<char>('a' + i % 26)) + std::to_string(i));
  toks.push_back("<eos>");
  auto trie = TokenTrie::Build(toks, 4096, {4095});
  const size_t per = sizeof(uint32_t) * static_cast<size_t>(trie->words());
  // Room for 12 masks in all; each regex below caches its start mask and one more per state.
  GrammarCache cache(trie, /*capacity=*/128, /*max_bytes=*/12 * per);
  std::vector<std::shared_ptr<Grammar>> held;
  std::vector<uint32_t> m(static_cast<size_t>(trie->words()));
  for (int i = 0; i < 10; ++i) {
    ConstraintSpec spec;
    spec.kind = ConstraintSpec::Kind::kRegex;
    spec.field = "structured_outputs.regex";
    spec.text = "[a-z][0-9]{1,4}x" + std::to_string(i);
    auto g = cache.Get(spec);
    ASSERT_TRUE(g.ok()) << g.status().message();
    // Visit a few states: the grammar's cache grows after Get.
    int32_t st = (*g)->start();
    for (int32_t id : {0, 27}) {
      ASSERT_TRUE((*g)->FillMask(st, m.data()).ok());
      st = (*g)->Advance(st, id);
      if (st < 0) break;
    }
    EXPECT_GE((*g)->CacheBytes(), 2 * per);
    held.push_back(*g);
  }
  // Without the byte bound all 10 would be kept (capacity 128); with it, the next Get evicts
  // down to 12 masks' worth (the one just used kept).
  ConstraintSpec again;
  again.kind = ConstraintSpec::Kind::kRegex;
  again.field = "structured_outputs.regex";
  again.text = "[a-z][0-9]{1,4}x9";
  ASSERT_TRUE(cache.Get(again).ok());
  EXPECT_LT(cache.size(), 10u);
  EXPECT_GE(cache.size(), 1u);
  EXPECT_LE(cache.bytes(), 12 * per);
  // A grammar dropped from the cache still works for a request that holds it.
  ASSERT_TRUE(held[0]->FillMask(held[0]->start(), m.data()).ok());
  // No byte bound to speak of: all kept.
  GrammarCache roomy(trie, 128, size_t{1} << 30);
  for (int i = 0; i < 10; ++i) {
    ConstraintSpec spec = again;
    spec.text = "[a-z]y" + std::to_string(i);
    ASSERT_TRUE(roomy.Get(spec).ok());
  }
  EXPECT_EQ(roomy.size(), 10u);
}

TEST(TokenMask, DemoChatTokenizerAndCache) {
  auto tok = Tokenizer::FromDirectory(std::string(SLUICE_FIXTURES_DIR) + "/../../models/demo-chat");
  ASSERT_TRUE(tok.ok()) << tok.status().message();
  auto trie = TokenTrie::FromTokenizer(**tok, 1024, {0, 2});
  ASSERT_TRUE(trie.ok()) << trie.status().message();
  EXPECT_GT((*trie)->num_tokens(), 900u);
  GrammarCache cache(*trie);
  ConstraintSpec spec;
  spec.kind = ConstraintSpec::Kind::kJsonSchema;
  spec.field = "response_format.json_schema.schema";
  spec.text =
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":5}},"required":["name"],"additionalProperties":false})";
  auto g = cache.Get(spec);
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto g2 = cache.Get(spec);
  EXPECT_EQ(g->get(), g2->get());
  EXPECT_EQ(cache.hits(), 1u);
  // Walk the tokenisation of a valid text: every token allowed, and only EOS at the end.
  auto enc = (*tok)->Encode(R"({"name":"Ann"})", false);
  ASSERT_TRUE(enc.ok());
  std::vector<uint32_t> m(static_cast<size_t>((*trie)->words()));
  int32_t s = (*g)->start();
  for (int32_t id : enc->ids) {
    ASSERT_TRUE((*g)->FillMask(s, m.data()).ok());
    ASSERT_TRUE(Allowed(m, id)) << id;
    s = (*g)->Advance(s, id);
    ASSERT_GE(s, 0);
  }
  EXPECT_TRUE((*g)->Finished(s));
  ASSERT_TRUE((*g)->FillMask(s, m.data()).ok());
  int allowed = 0;
  for (int i = 0; i < 1024; ++i) allowed += Allowed(m, i);
  EXPECT_EQ(allowed, 2);  // both EOS ids
  spec.text = R"({"type":"string","format":"hostname"})";
  auto bad = cache.Get(spec);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("response_format.json_schema.schema: json_schema: /format"),
            std::string::npos)
      << bad.status().message();
}

TEST(Grammar, GbnfNonRecursive) {
  const char* sql = R"(# a SQL subset
root   ::= "SELECT " cols " FROM " name where?
cols   ::= "*" | name (", " name){0,3}
where  ::= " WHERE " name " = " value
value  ::= [0-9]+ | "'" [^']* "'"
name   ::= [a-z_] [a-z0-9_]*
)";
  auto e = CompileGrammar(sql);
  ASSERT_TRUE(e.ok()) << e.status().message();
  auto nfa = BuildNfa(*e);
  Dfa d(*nfa, 100000);
  EXPECT_TRUE(d.Matches("SELECT * FROM users"));
  EXPECT_TRUE(d.Matches("SELECT id, name FROM users WHERE id = 42"));
  EXPECT_TRUE(d.Matches("SELECT a FROM t WHERE b = 'x y'"));
  EXPECT_FALSE(d.Matches("SELECT FROM users"));
  EXPECT_FALSE(d.Matches("SELECT a, b, c, d, e FROM t"));
  auto multi = CompileGrammar("root ::= \"a\"\n       | \"b\" (\n  \"c\" )\n");
  ASSERT_TRUE(multi.ok()) << multi.status().message();
  Dfa m(*BuildNfa(*multi), 1000);
  EXPECT_TRUE(m.Matches("bc"));
  EXPECT_TRUE(m.Matches("a"));
  auto rec = CompileGrammar("root ::= \"(\" root \")\" | \"x\"\n");  // pushdown_test.cc
  ASSERT_TRUE(rec.ok()) << rec.status().message();
  EXPECT_TRUE((*rec)->has_ref);
  auto undef = CompileGrammar("root ::= thing\n");
  ASSERT_FALSE(undef.ok());
  EXPECT_NE(undef.status().message().find("rule \"thing\" is not defined"), std::string::npos);
  auto syntax = CompileGrammar("root ::= \"a\" @\n");
  ASSERT_FALSE(syntax.ok());
  EXPECT_NE(syntax.status().message().find("line 1, column 14"), std::string::npos)
      << syntax.status().message();
  EXPECT_FALSE(CompileGrammar("x ::= \"a\"\n").ok());  // no root
}

}  // namespace
}  // namespace sluice::structured
