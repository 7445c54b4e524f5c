#include "structured/regex.h"

#include <gtest/gtest.h>

#include "util.h"

namespace sluice::structured {
namespace {

using testing::DfaOf;

std::shared_ptr<Dfa> Full(const std::string& re) {
  auto e = ParseRegex(re, RegexMode::kFullMatch);
  EXPECT_TRUE(e.ok()) << re << ": " << e.status().message();
  return DfaOf(*e);
}
std::shared_ptr<Dfa> Search(const std::string& re) {
  auto e = ParseRegex(re, RegexMode::kSearch);
  EXPECT_TRUE(e.ok()) << re << ": " << e.status().message();
  return DfaOf(*e);
}

TEST(Regex, LiteralsClassesQuantifiers) {
  auto d = Full("ab[c-e]x{2,3}y?z*");
  EXPECT_TRUE(d->Matches("abcxx"));
  EXPECT_TRUE(d->Matches("abexxxyzzz"));
  EXPECT_FALSE(d->Matches("abfxx"));
  EXPECT_FALSE(d->Matches("abcx"));
  EXPECT_FALSE(d->Matches("abcxxxx"));
  auto e = Full("(?:foo|ba(r|z))+");
  EXPECT_TRUE(e->Matches("foobarbaz"));
  EXPECT_FALSE(e->Matches("fooba"));
  EXPECT_FALSE(e->Matches(""));
  auto n = Full("[^a-c]{2}");
  EXPECT_TRUE(n->Matches("xy"));
  EXPECT_TRUE(n->Matches("\xc3\xa9\xe2\x82\xac"));  // two non-ASCII characters
  EXPECT_FALSE(n->Matches("xa"));
  EXPECT_FALSE(n->Matches("\xc3"));  // never invalid UTF-8
  auto b = Full("a{3}|b{2,}");
  EXPECT_TRUE(b->Matches("aaa"));
  EXPECT_TRUE(b->Matches("bbbbb"));
  EXPECT_FALSE(b->Matches("b"));
  auto lazy = Full("a+?b*?");
  EXPECT_TRUE(lazy->Matches("aab"));
}

TEST(Regex, EscapesAndDot) {
  auto d = Full(R"(\d+\.\d{2}\s\w\W\x41\u00e9\u{1F600}\/\-)");
  EXPECT_TRUE(d->Matches("12.34 a!A\xc3\xa9\xf0\x9f\x98\x80/-"));
  EXPECT_FALSE(d->Matches("12.3 a!A\xc3\xa9\xf0\x9f\x98\x80/-"));
  auto dot = Full("a.b");
  EXPECT_TRUE(
      dot->Matches("a\xe2\x82\xac"
                   "b"));
  EXPECT_FALSE(dot->Matches("a\nb"));
  auto cls = Full(R"([\d\-_.]+)");
  EXPECT_TRUE(cls->Matches("1-2_3.4"));
  EXPECT_FALSE(cls->Matches("a"));
  auto surrogate = Full(R"(\uD83D\uDE00)");
  EXPECT_TRUE(surrogate->Matches("\xf0\x9f\x98\x80"));
  auto empty = Full("[]");
  EXPECT_FALSE(empty->Matches(""));
  EXPECT_FALSE(empty->Matches("a"));
  auto any = Full("[^]");
  EXPECT_TRUE(any->Matches("\n"));
}

TEST(Regex, SearchSemanticsAndAnchors) {
  auto s = Search("abc");
  EXPECT_TRUE(s->Matches("xxabcyy"));
  EXPECT_FALSE(s->Matches("ab"));
  auto a = Search("^abc");
  EXPECT_TRUE(a->Matches("abcyy"));
  EXPECT_FALSE(a->Matches("xabc"));
  auto both = Search("^[a-z]+$");
  EXPECT_TRUE(both->Matches("abc"));
  EXPECT_FALSE(both->Matches("abc1"));
  EXPECT_FALSE(both->Matches(""));
  auto alts = Search("^a$|^b$");
  EXPECT_TRUE(alts->Matches("a"));
  EXPECT_FALSE(alts->Matches("ab"));
  auto grouped = Search("(^a$|^bc$)");
  EXPECT_TRUE(grouped->Matches("bc"));
  EXPECT_FALSE(grouped->Matches("xbc"));
  auto wrapped = Search("^(?:x|y)+$");
  EXPECT_TRUE(wrapped->Matches("xyx"));
  EXPECT_FALSE(wrapped->Matches("xz"));
  auto full = Full("^ab$");  // anchors are no-ops in full-match mode
  EXPECT_TRUE(full->Matches("ab"));
}

TEST(Regex, RefusesWithPreciseErrors) {
  struct Case {
    const char* re;
    const char* what;
  } cases[] = {
      {"(a)\\1", "backreference"},     {"a(?=b)", "lookahead"},
      {"(?<!a)b", "lookbehind"},       {"\\bword", "word boundary"},
      {"\\p{L}", "Unicode property"},  {"(?i)abc", "inline flags"},
      {"a++", "possessive"},           {"a^b", "anchor ^ at offset 1"},
      {"a$b", "anchor $ at offset 1"}, {"*a", "nothing to repeat"},
      {"(ab", "unterminated group"},   {"[ab", "unterminated character class"},
      {"ab)", "unmatched ')'"},        {"[z-a]", "range out of order"},
      {"\\q", "unknown escape"},       {"a{3,2}", "max < min"},
      {"\\uD800", "lone surrogate"},
  };
  for (const Case& c : cases) {
    auto e = ParseRegex(c.re, RegexMode::kSearch);
    ASSERT_FALSE(e.ok()) << c.re;
    EXPECT_NE(e.status().message().find(c.what), std::string::npos)
        << c.re << " -> " << e.status().message();
  }
}

TEST(Automaton, LazyDfaCachesStatesAndTransitions) {
  auto d = Full("[a-z]{1,3}");
  EXPECT_TRUE(d->Matches("abc"));
  const size_t n = d->num_states();
  EXPECT_TRUE(d->Matches("xyz"));
  EXPECT_EQ(d->num_states(), n);  // same states reused
  const int32_t s = d->Run(d->start(), "abc");
  EXPECT_TRUE(d->Accepting(s));
  EXPECT_FALSE(d->HasNext(s));
  EXPECT_TRUE(d->HasNext(d->start()));
}

TEST(Automaton, AndIsIntersection) {
  auto a = ParseRegex("[a-c]+", RegexMode::kFullMatch);
  auto b = ParseRegex(".{2}", RegexMode::kFullMatch);
  auto d = DfaOf(And(*a, *b));
  EXPECT_TRUE(d->Matches("ab"));
  EXPECT_FALSE(d->Matches("abc"));
  EXPECT_FALSE(d->Matches("ax"));
}

TEST(Automaton, TooLargeIsRefused) {
  auto e = ParseRegex("(a{1000}){1000}", RegexMode::kFullMatch);
  ASSERT_TRUE(e.ok());
  auto nfa = BuildNfa(*e, {100000, 1000});
  ASSERT_FALSE(nfa.ok());
  EXPECT_NE(nfa.status().message().find("too large"), std::string::npos);
}

}  // namespace
}  // namespace sluice::structured
