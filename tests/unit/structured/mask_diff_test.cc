// Differential test of the token-mask fast paths (token_mask.h: after-first-byte walks, loop
// covers, abstract pushdown configurations) against Grammar::ReferenceMask, the plain walk of
// the whole trie: the masks must be identical bit for bit in every state a walk reaches, along
// random valid walks (tokens drawn from the mask, biased to nest deep), along the tokenisation
// of valid and invalid texts up to the refused token, and near the recursion limit. The
// vocabulary is synthetic and large (~30k tokens: words with and without a leading space and
// a quote, JSON punctuation runs, digits, escapes, UTF-8 characters and their pieces, all 256
// bytes).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "structured/grammar.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured/token_mask.h"

namespace sluice::structured {
namespace {

std::vector<std::optional<std::string>> SyntheticVocab(size_t target) {
  std::set<std::string> toks;
  for (int b = 0; b < 256; ++b) toks.insert(std::string(1, static_cast<char>(b)));
  const std::vector<std::string> words = {
      "name",  "type",    "value", "id",     "items", "description", "properties", "string",
      "true",  "false",   "null",  "number", "kids",  "next",        "v",          "a",
      "b",     "ab",      "abc",   "key",    "data",  "list",        "object",     "array",
      "hello", "world",   "the",   "of",     "and",   "to",          "in",         "is",
      "for",   "version", "url",   "http",   "https", "com",         "user",       "email"};
  const std::vector<std::string> punct = {"{",  "}",  "[", "]", "\"", ",", ":", " ",
                                          "\n", "\\", "-", ".", "0",  "1", "e", "+"};
  std::mt19937 rng(7);
  for (const std::string& w : words) {
    for (const char* pre : {"", " ", "\"", "{\"", ",\"", "_", "."}) {
      for (const char* post : {"", "\"", "\":", "\":\"", "\",", "\"}", "s", "ed"}) {
        toks.insert(std::string(pre) + w + post);
        std::string cap = w;
        cap[0] = static_cast<char>(std::toupper(cap[0]));
        toks.insert(std::string(pre) + cap + post);
      }
    }
  }
  for (int i = 0; i < 1000; ++i) toks.insert(std::to_string(i));
  // Long tokens (a few, as real vocabularies have): runs longer than most, a quote or an escape
  // deep inside, multi-byte characters (several bytes, one character of a maxLength).
  std::string cjk, esc, cafe;
  for (int i = 0; i < 12; ++i) cjk += "\xe4\xb8\xad";
  for (int i = 0; i < 6; ++i) esc += "x\\\\y\\\"z";
  for (int i = 0; i < 8; ++i) cafe += "caf\xc3\xa9";
  for (const std::string& t :
       {std::string(30, 'a'), std::string(45, 'b'), std::string(64, ' '), std::string(90, 'z'),
        std::string("abcdefghij") + "abcdefghij" + "abcdefghij" + "\"",
        std::string("abcdefghij") + "abcdefghij" + "abcdefghij" + "\",\"b\":\"", cjk, esc, cafe,
        "a" + cjk, std::string(25, 'q') + "\xe4\xb8\xad" + std::string(25, 'q')}) {
    toks.insert(t);
  }
  for (const char* t :
       {"\\\"", "\\\\", "\\n", "\\u", "\\u00", "\xc3\xa9", "\xc3", "\xa9", "\xe4\xb8\xad",
        "\xe4\xb8", "\xf0\x9f\x98\x80", "\xf0\x9f", "\x98\x80", " \xc3\xa9t\xc3\xa9", "caf\xc3\xa9",
        "\":{\"", "\":[", "\"},{\"", "}}", "]]", "}]", "]}", "}]}", "\":\"", "\",\"", "\"]", "[\"",
        "[{", "{}", "[]", "\"\"", "0.", ".5", "1e", "-1", "true,", "null}", "1}", "2]", ",{", ":{",
        // keys that leave a declared name, then close their object
        "nax\":1}", "nbx\":2}]", "namex\":3},", "x\":1}"}) {
    toks.insert(t);
  }
  // Random punctuation runs and letter strings up to the target.
  std::uniform_int_distribution<int> len(2, 6);
  while (toks.size() < target) {
    std::string t;
    const int n = len(rng);
    if (rng() % 3 == 0) {
      for (int i = 0; i < n; ++i) t += punct[rng() % punct.size()];
    } else {
      if (rng() % 2) t += ' ';
      for (int i = 0; i < n; ++i) t += static_cast<char>('a' + rng() % 26);
      if (rng() % 4 == 0) t += punct[rng() % punct.size()];
    }
    toks.insert(t);
  }
  std::vector<std::optional<std::string>> out(toks.begin(), toks.end());
  std::shuffle(out.begin(), out.end(), rng);  // ids unrelated to the bytes' order
  out.push_back("<eos>");
  out.push_back(std::nullopt);  // a special token: never allowed
  return out;
}

class MaskDiff : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto v = SyntheticVocab(30000);
    eos_ = static_cast<int32_t>(v.size() - 2);
    trie_ = TokenTrie::Build(v, static_cast<int>(v.size()) + 5, {eos_});
    for (size_t i = 0; i < v.size(); ++i) {
      if (v[i] && static_cast<int32_t>(i) != eos_) ids_[*v[i]] = static_cast<int32_t>(i);
    }
  }
  static std::vector<int32_t> Allowed(const std::vector<uint32_t>& m) {
    std::vector<int32_t> out;
    for (size_t i = 0; i < m.size(); ++i) {
      for (uint32_t w = m[i]; w; w &= w - 1)
        out.push_back(static_cast<int32_t>(i * 32 + __builtin_ctz(w)));
    }
    return out;
  }
  // Compares the masks of state s; returns the fast mask.
  static std::vector<uint32_t> Check(Grammar& g, int32_t s, const std::string& where) {
    std::vector<uint32_t> fast(static_cast<size_t>(trie_->words())), ref(fast.size());
    Status a = g.FillMask(s, fast.data());
    Status b = g.ReferenceMask(s, ref.data());
    EXPECT_EQ(a.ok(), b.ok()) << where << ": " << a.message() << " / " << b.message();
    if (!a.ok() || !b.ok()) return {};
    if (fast != ref) {
      std::vector<int32_t> fa = Allowed(fast), ra = Allowed(ref), only_fast, only_ref;
      std::set_difference(fa.begin(), fa.end(), ra.begin(), ra.end(),
                          std::back_inserter(only_fast));
      std::set_difference(ra.begin(), ra.end(), fa.begin(), fa.end(), std::back_inserter(only_ref));
      std::string msg = where + ": allowed only by the fast path:";
      for (size_t i = 0; i < std::min<size_t>(only_fast.size(), 8); ++i) {
        const std::string* bts = trie_->bytes(only_fast[i]);
        msg += " [" + (bts ? *bts : std::string("eos")) + "]";
      }
      msg += "; only by the reference:";
      for (size_t i = 0; i < std::min<size_t>(only_ref.size(), 8); ++i) {
        const std::string* bts = trie_->bytes(only_ref[i]);
        msg += " [" + (bts ? *bts : std::string("eos")) + "]";
      }
      ADD_FAILURE() << msg << " (" << only_fast.size() << " / " << only_ref.size() << ")";
    }
    return fast;
  }
  // Random walks drawing tokens from the mask; `deep`: prefer tokens that open a container.
  static void RandomWalks(Grammar& g, int walks, int steps, uint32_t seed, bool deep) {
    std::mt19937 rng(seed);
    for (int w = 0; w < walks; ++w) {
      int32_t s = g.start();
      for (int i = 0; i < steps && s >= 0; ++i) {
        std::vector<uint32_t> m =
            Check(g, s, "walk " + std::to_string(w) + " step " + std::to_string(i));
        if (m.empty()) return;
        std::vector<int32_t> allowed = Allowed(m), opening;
        allowed.erase(std::remove(allowed.begin(), allowed.end(), eos_), allowed.end());
        if (allowed.empty()) break;
        if (deep) {
          for (int32_t id : allowed) {
            const std::string* b = trie_->bytes(id);
            if (b && (b->find('{') != std::string::npos || b->find('[') != std::string::npos)) {
              opening.push_back(id);
            }
          }
        }
        const std::vector<int32_t>& pool = (!opening.empty() && rng() % 3 != 0) ? opening : allowed;
        const int32_t t = pool[rng() % pool.size()];
        s = g.Advance(s, t);
        ASSERT_GE(s, 0) << "a token of the mask was refused by Advance";
      }
    }
  }
  // Greedy longest-match tokenisation of text; masks compared up to the first refused token.
  static void FollowText(Grammar& g, const std::string& text) {
    int32_t s = g.start();
    size_t i = 0;
    while (i < text.size()) {
      std::vector<uint32_t> m =
          Check(g, s, "text " + text.substr(0, 40) + " at " + std::to_string(i));
      if (m.empty()) return;
      int32_t id = -1;
      size_t n = std::min<size_t>(text.size() - i, 96);
      for (; n > 0; --n) {
        auto it = ids_.find(text.substr(i, n));
        if (it != ids_.end()) {
          id = it->second;
          break;
        }
      }
      ASSERT_GE(id, 0);
      if (!((m[static_cast<size_t>(id) / 32] >> (id % 32)) & 1)) return;  // refused here
      s = g.Advance(s, id);
      ASSERT_GE(s, 0);
      i += n;
    }
    Check(g, s, "end of " + text.substr(0, 40));
  }
  static std::shared_ptr<Grammar> Make(const ExprP& e) {
    auto g = Grammar::Create(e, trie_);
    EXPECT_TRUE(g.ok()) << g.status().message();
    return g.ok() ? *g : nullptr;
  }
  static std::shared_ptr<Grammar> Schema(const std::string& s) {
    auto e = CompileJsonSchema(s, {});
    EXPECT_TRUE(e.ok()) << s << ": " << e.status().message();
    return e.ok() ? Make(*e) : nullptr;
  }

  static inline std::shared_ptr<const TokenTrie> trie_;
  static inline std::map<std::string, int32_t> ids_;
  static inline int32_t eos_ = 0;
};

std::string Nested(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += i % 2 ? "[" : "{\"k\":";
  s += "1";
  for (int i = depth - 1; i >= 0; --i) s += i % 2 ? "]" : "}";
  return s;
}

TEST_F(MaskDiff, RegexStringsAndAlternatives) {
  auto re = ParseRegex(R"("([^"\\]|\\["\\n])*"(,"[a-z]{1,8}")*)", RegexMode::kFullMatch);
  ASSERT_TRUE(re.ok()) << re.status().message();
  auto g = Make(*re);
  ASSERT_TRUE(g);
  EXPECT_FALSE(g->pushdown());
  RandomWalks(*g, 6, 40, 1, false);
  FollowText(*g, R"("hello world \"caf)"
                 "\xc3\xa9"
                 R"(\" \\n","abc","de")");
  FollowText(*g, R"("a","ABC")");
}

TEST_F(MaskDiff, ObjectWithManyOptionalKeysAndFreeExtraKeys) {
  // Keys typed among many optional ones next to "any other key" (the AndNot of a free string
  // and the declared keys): most first bytes lead to one state.
  std::string props;
  for (const char* k : {"name", "names", "type", "value", "version", "url", "user", "email", "id",
                        "items", "description", "data"}) {
    props += std::string(props.empty() ? "" : ",") + "\"" + k +
             "\":{\"type\":\"string\",\"maxLength\":12}";
  }
  auto g = Schema(R"({"type":"object","properties":{)" + props +
                  R"(},"additionalProperties":{"type":"integer"}})");
  ASSERT_TRUE(g);
  RandomWalks(*g, 8, 40, 2, false);
  FollowText(*g, R"({"name":"ab","version":"1.0","other":12,"user":"x"})");
  FollowText(*g, R"({"names":"ab","nam":3,"description":"hello world"})");
  FollowText(*g, R"({"name":12})");  // invalid: refused at the number
}

TEST_F(MaskDiff, KeysLeavingDeclaredNamesInsideRecursion) {
  // A key typed next to declared names ("name", "names") in a nested object: a token that
  // leaves the names ("nax") reaches the "any other key" state, whose walk the key's mask
  // reuses; its tokens that close the object ("nax\":1}") depend on the stack below.
  auto g = Schema(R"({"type":"object","properties":{"name":{"type":"string"},
      "names":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},
      "additionalProperties":{"type":"integer"}})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->pushdown());
  FollowText(*g, R"({"kids":[{"nax":1},{"name":"a","nbx":2}],"namex":3})");
  FollowText(*g, R"({"kids":[{"kids":[{"x":1}]},{"names":5}]})");
  RandomWalks(*g, 8, 50, 11, true);
}

TEST_F(MaskDiff, FreeJsonValuesArePushdown) {
  auto g = Schema("{}");
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->pushdown());
  RandomWalks(*g, 8, 60, 3, true);
  RandomWalks(*g, 4, 60, 4, false);
  FollowText(*g, R"({"a":{"b":[{"c":[[[{"d":null}]]]}]},"e":"caf)"
                 "\xc3\xa9"
                 R"("})");
  FollowText(*g, R"([1,[2,[3,{"k":"v"}]],{"x":[true,false,null]}])");
  FollowText(*g, R"({"a":[1,2}})");  // invalid: refused at the brace
  FollowText(*g, R"({"a":{"b":1}]})");
}

TEST_F(MaskDiff, FreeValuesNearTheRecursionLimit) {
  auto g = Schema("{}");
  ASSERT_TRUE(g);
  for (int d : {60, 110, 125, kMaxRecursionDepth, kMaxRecursionDepth + 1})
    FollowText(*g, Nested(d));
}

TEST_F(MaskDiff, RecursiveRefsTreeAndList) {
  auto tree = Schema(R"({"type":"object","properties":{
      "v":{"type":"integer"},"kids":{"type":"array","items":{"$ref":"#"}}},
      "required":["v"],"additionalProperties":false})");
  ASSERT_TRUE(tree);
  RandomWalks(*tree, 8, 60, 5, true);
  FollowText(*tree, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4,"kids":[]}]}]})");
  FollowText(*tree, R"({"v":1,"kids":[{"v":2,"kids":[{}]}]})");  // invalid
  auto list = Schema(R"({"$defs":{"node":{"type":"object","properties":{
      "value":{"type":"string"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},
      "required":["value","next"],"additionalProperties":false}},"$ref":"#/$defs/node"})");
  ASSERT_TRUE(list);
  RandomWalks(*list, 8, 60, 6, true);
  FollowText(*list, R"({"value":"a","next":{"value":"b","next":{"value":"c","next":null}}})");
  FollowText(*list, R"({"value":"a","next":{"value":1,"next":null}})");  // invalid
}

TEST_F(MaskDiff, RecursiveGrammar) {
  auto e = CompileGrammar(R"g(root   ::= expr
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= [0-9]+ | "(" expr ")" | "-" factor | "\"" [a-z ]* "\""
)g");
  ASSERT_TRUE(e.ok()) << e.status().message();
  auto g = Make(*e);
  ASSERT_TRUE(g);
  RandomWalks(*g, 8, 40, 7, false);
  FollowText(*g, "((1+2)*(3-4))/\"ab c\"");
  FollowText(*g, "((1+2)*3))");  // invalid
}

TEST_F(MaskDiff, CountedStringPositionsShareMasks) {
  // maxLength strings (Nfa::Counted): positions far from both bounds share one mask
  // (Grammar::Canonical); every mask along the way must still equal the plain walk, at the
  // bounds too (tokens that would overrun maxLength, the closing quote before minLength).
  auto g = Schema(R"({"type":"object","properties":{
      "a":{"type":"string","maxLength":300},
      "b":{"type":"string","minLength":150,"maxLength":400},
      "c":{"type":"array","items":{"type":"string","minLength":2,"maxLength":40},"maxItems":3}},
      "required":["a","b","c"],"additionalProperties":false})");
  ASSERT_TRUE(g);
  const std::string a300(300, 'a'), b150(150, 'b'), b400(400, 'b');
  FollowText(*g, "{\"a\":\"" + a300 + "\",\"b\":\"" + b150 + "\",\"c\":[\"xy\",\"" +
                     std::string(40, 'z') + "\"]}");
  FollowText(*g, "{\"a\":\"" + a300 + "a\"");  // one over maxLength: refused at the end
  FollowText(*g, "{\"a\":\"\",\"b\":\"" + std::string(149, 'b') + "\"");  // one short of minLength
  FollowText(*g, "{\"a\":\"hello world, caf\xc3\xa9 \\\"quoted\\\" \\n\",\"b\":\"" + b400 +
                     "\",\"c\":[]}");
  RandomWalks(*g, 6, 400, 11, false);
}

TEST_F(MaskDiff, CountedPositionsAreWalkedOnce) {
  // 1,000 positions of one string, typed one byte at a time: each a state of its own, but only
  // the positions within a token's reach of a bound need a mask of their own.
  auto g = Schema(R"({"type":"string","maxLength":1000})");
  ASSERT_TRUE(g);
  int32_t s = g->start();
  std::vector<uint32_t> m(static_cast<size_t>(trie_->words()));
  std::set<int32_t> states;
  s = g->Advance(s, ids_.at("\""));
  for (int i = 0; i < 1000 && s >= 0; ++i) {
    states.insert(s);
    ASSERT_TRUE(g->FillMask(s, m.data()).ok());
    s = g->Advance(s, ids_.at(i % 2 ? "a" : "b"));
  }
  ASSERT_GE(s, 0);
  EXPECT_EQ(states.size(), 1000u);
  // The synthetic vocabulary's longest tokens are ~20 bytes: ~20 positions before the end,
  // the first position and the shared one.
  EXPECT_LT(g->MaskWalks(), 60u);
  Check(*g, s, "at maxLength");
  RandomWalks(*g, 3, 200, 12, false);
}

TEST_F(MaskDiff, CountedRegexRepetitions) {
  for (const char* pattern : {"[a-z]{5,400}x", "(ab[0-9]{0,40}){20,30}", "[\\u00e9a]{0,100}!",
                              "\"([^\"\\\\]|\\\\[\"\\\\n]){30,200}\"(,[a-z]{40,60})*"}) {
    auto re = ParseRegex(pattern, RegexMode::kFullMatch);
    ASSERT_TRUE(re.ok()) << pattern << ": " << re.status().message();
    auto g = Make(*re);
    ASSERT_TRUE(g);
    RandomWalks(*g, 4, 300, 13, false);
  }
  auto re = ParseRegex("[a-z]{5,400}x", RegexMode::kFullMatch);
  ASSERT_TRUE(re.ok());
  auto g = Make(*re);
  ASSERT_TRUE(g);
  FollowText(*g, std::string(400, 'q') + "x");
  FollowText(*g, std::string(401, 'q') + "x");  // refused
  FollowText(*g, "abcdx");                      // refused: 4 < 5
}

TEST_F(MaskDiff, CountedStringsNearTheirBounds) {
  // Short and long maxLength strings (positions within a token's reach of the end: NearWalk;
  // the After walk of a position with room left: CountedAfter), minLength 1, free extra keys
  // (pushdown), walked with long tokens, multi-byte characters and escapes at every position.
  auto g = Schema(R"({"type":"object","properties":{
      "s":{"type":"string","minLength":1,"maxLength":20},
      "m":{"type":"string","maxLength":36},
      "l":{"type":"string","minLength":1,"maxLength":64},
      "x":{"type":"string","maxLength":256}},
      "required":["s","m","l"]})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->pushdown());
  const std::string cjk12 = [] {
    std::string t;
    for (int i = 0; i < 12; ++i) t += "\xe4\xb8\xad";
    return t;
  }();
  for (int n : {1, 5, 19, 20}) {
    FollowText(*g, "{\"s\":\"" + std::string(static_cast<size_t>(n), 'a') + "\",\"m\":\"" + cjk12 +
                       cjk12 + cjk12 + "\",\"l\":\"" + std::string(64, 'b') + "\",\"x\":\"" +
                       std::string(200, 'z') + cjk12 + "\"}");
  }
  FollowText(*g, "{\"s\":\"" + std::string(21, 'a') + "\"");  // one over: refused
  FollowText(*g, "{\"s\":\"q\",\"m\":\"" + std::string(30, 'a') + "\",\"l\":\"" +
                     std::string(45, 'b') + std::string(19, 'c') + "\"}");
  RandomWalks(*g, 8, 300, 15, false);
  RandomWalks(*g, 4, 300, 16, true);
}

TEST_F(MaskDiff, CountedStringsInsideRecursion) {
  auto g = Schema(R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":120},
      "kids":{"type":"array","items":{"$ref":"#"}}},
      "required":["name"],"additionalProperties":false})");
  ASSERT_TRUE(g);
  EXPECT_TRUE(g->pushdown());
  RandomWalks(*g, 6, 300, 14, true);
  FollowText(*g, "{\"name\":\"" + std::string(120, 'n') + "\",\"kids\":[{\"name\":\"" +
                     std::string(100, 'k') + "\"}]}");
}

TEST_F(MaskDiff, ThreadsAskOneGrammarAtOnce) {
  // The generation engine's mask threads ask one grammar for the masks of many requests under
  // the same schema at once: known masks are read beside walks of other states, and a closed
  // object's (Dfa) positions near a maxLength bound walk their exceptions under a shared lock,
  // several threads at once, walking again alone when the Dfa lacks a transition. Every mask
  // must equal the reference, from the first walks of a fresh grammar on; a pushdown schema
  // the same way.
  for (const char* schema : {R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":24},
      "tags":{"type":"array","items":{"type":"string","minLength":1,"maxLength":9},"maxItems":4},
      "n":{"type":"integer","minimum":0,"maximum":999},
      "note":{"type":"string","maxLength":60}},
      "required":["name","tags"],"additionalProperties":false})",
                             R"({"type":"object","properties":{
      "name":{"type":"string","maxLength":30},
      "kids":{"type":"array","items":{"$ref":"#"}}},
      "required":["name"]})"}) {
    auto g = Schema(schema);
    ASSERT_TRUE(g);
    std::vector<std::thread> threads;
    for (uint32_t k = 0; k < 8; ++k) {
      threads.emplace_back([&g, k] { RandomWalks(*g, 4, 160, 200 + k, k % 4 == 3); });
    }
    for (std::thread& t : threads) t.join();
  }
}

}  // namespace
}  // namespace sluice::structured
