// Token classification post-processing details the pipeline fixtures may not reach: byte to
// character offsets inside multi-byte characters (HF tokenizers' converter), and /absa on a
// sequence classifier (the sentiment of each (aspect, review) pair, no spans) and on a token
// classifier with a sentiment model beside it (spans from one, sentiments from the other).
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
  const IoProcessor* p = reg.FindRoute("/absa");
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

TEST(Absa, SentimentModelGivesTheSentimentAndTheTokenClassifierTheSpans) {
  const std::string fixtures = SLUICE_FIXTURES_DIR;
  auto tok = Tokenizer::FromDirectory(fixtures + "/token_classification/bert_wordpiece_ko/model");
  auto side_tok = Tokenizer::FromDirectory(fixtures + "/../../models/demo-reranker");
  ASSERT_TRUE(tok.ok() && side_tok.ok());
  ProcessorRegistry reg;
  ModelContext m;
  m.name = "m";
  m.task = "token-classify";
  m.labels = {"O", "B-POS", "I-POS", "B-NEG", "I-NEG"};
  m.absa = true;
  m.absa_sentiments = {{"POS", "positive"}, {"upbeat", "happy"}};
  m.model_max_tokens = m.max_tokens_per_input = 128;
  m.tokenizer = tok->get();
  auto side = std::make_shared<ModelContext>();
  side->task = "classify";
  side->labels = {"upbeat", "grim"};
  side->model_max_tokens = side->max_tokens_per_input = 128;
  side->tokenizer = side_tok->get();
  m.companion = side;
  const IoProcessor* p = reg.FindRoute("/absa");
  const std::string review = "the food was great";
  auto st = p->Parse(
      IoRequest{"/absa", R"({"review": "the food was great", "aspects": ["food", "wait"]})", &m});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  std::vector<TokenSequence> seqs, side_seqs;
  ASSERT_TRUE(p->PreProcess(m, **st, &seqs).ok());
  ASSERT_TRUE(p->PreProcessCompanion(*side, **st, &side_seqs).ok());
  ASSERT_EQ(seqs.size(), 2u);
  ASSERT_EQ(side_seqs.size(), 2u);
  // The sentiment model's sequences are the pairs in its own tokenizer.
  for (size_t i = 0; i < 2; ++i) {
    auto want = (*side_tok)->EncodePair(i == 0 ? "food" : "wait", review);
    ASSERT_TRUE(want.ok());
    EXPECT_EQ(side_seqs[i].ids, want->ids);
  }
  EXPECT_NE(seqs[0].ids, side_seqs[0].ids);
  // Token outputs: every review token B-POS (spans "positive"); sentiment outputs differ.
  std::vector<PooledOutput> outs(2);
  for (size_t i = 0; i < 2; ++i) {
    outs[i].rows = static_cast<int>(seqs[i].ids.size());
    for (int r = 0; r < outs[i].rows; ++r) {
      outs[i].values.insert(outs[i].values.end(), {0.1f, 0.6f, 0.1f, 0.1f, 0.1f});
    }
  }
  (*st)->companion_outputs.resize(2);
  (*st)->companion_outputs[0].values = {0.2f, 0.8f};
  (*st)->companion_outputs[1].values = {0.75f, 0.25f};
  auto r = p->PostProcess(m, **st, outs);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->body.find(R"({"aspect":"food","sentiment":"grim","score":0.8,"spans":[{"label":)"
                         R"("positive")"),
            std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find(R"({"aspect":"wait","sentiment":"happy","score":0.75,"spans":[{)"),
            std::string::npos)
      << r->body;
  // Outputs that do not match the aspects are an internal error, not a guess.
  (*st)->companion_outputs.resize(1);
  EXPECT_EQ(p->PostProcess(m, **st, outs).status().code(), StatusCode::kInternal);
}

}  // namespace
}  // namespace sluice::io
