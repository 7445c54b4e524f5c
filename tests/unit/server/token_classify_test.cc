// Token classification post-processing details the pipeline fixtures may not reach: byte to
// character offsets inside multi-byte characters (HF tokenizers' converter), and /absa on a
// sequence classifier (the sentiment of each (aspect, review) pair, no spans).
#include "io/token_classify.h"

#include <gtest/gtest.h>

#include "io/builtins.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {
namespace {

TEST(CharOffsets, ConvertsLikeHfTokenizers) {
  const std::string text =
      "\xED\x95\x9C"
      "a\xF0\x9F\x99\x82";  // 한 a 🙂: 3 + 1 + 4 bytes
  CharOffsets c(text);
  EXPECT_EQ(c.num_chars(), 3);
  using P = std::pair<int64_t, int64_t>;
  EXPECT_EQ(c.Convert(0, 3), P(0, 1));
  EXPECT_EQ(c.Convert(1, 3), P(0, 1));  // a start inside a character: that character
  EXPECT_EQ(c.Convert(0, 2), P(0, 0));  // an end inside one: the character holding it
  EXPECT_EQ(c.Convert(3, 4), P(1, 2));
  EXPECT_EQ(c.Convert(4, 8), P(2, 3));  // to the end: one past the last byte's character
  EXPECT_EQ(c.Convert(4, 6), P(2, 2));
  EXPECT_EQ(c.Convert(8, 8), P(8, 8));  // at the end: unchanged
  EXPECT_EQ(c.Slice(1, 3), "a\xF0\x9F\x99\x82");
  EXPECT_EQ(c.Char(0), "\xED\x95\x9C");
  EXPECT_EQ(c.Char(5), "");
  CharOffsets empty("");
  EXPECT_EQ(empty.Convert(0, 0), P(0, 0));
}

TEST(Absa, SequenceClassifierGivesThePairsSentiment) {
  ProcessorRegistry reg;
  ModelContext m;
  m.name = "m";
  m.task = "classify";
  m.labels = {"negative", "POSITIVE"};
  m.absa = true;
  m.absa_sentiments = {{"negative", "bad"}};
  m.model_max_tokens = m.max_tokens_per_input = 64;
  const IoProcessor* p = reg.Find("/absa");
  auto st = p->Parse(IoRequest{"/absa", R"({"review": "r", "aspects": ["food", "wait"]})", &m});
  EXPECT_EQ(st.status().code(), StatusCode::kFailedPrecondition);  // needs the tokenizer
  auto tok =
      Tokenizer::FromDirectory(std::string(SLUICE_FIXTURES_DIR) + "/../../models/demo-reranker");
  ASSERT_TRUE(tok.ok());
  m.tokenizer = tok->get();
  st = p->Parse(IoRequest{"/absa", R"({"review": "r", "aspects": ["food", "wait"]})", &m});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  std::vector<PooledOutput> outs(2);
  outs[0].values = {0.25f, 0.75f};
  outs[1].values = {0.9f, 0.1f};
  auto r = p->PostProcess(m, **st, outs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->body.find(R"({"aspect":"food","sentiment":"positive","score":0.75,"spans":[]})"),
            std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find(R"({"aspect":"wait","sentiment":"bad","score":0.9,"spans":[]})"),
            std::string::npos)
      << r->body;
}

}  // namespace
}  // namespace sluice::io
