// Causal-LM reranker prompts (Qwen3-Reranker): the score/rerank processors render text
// pairs with the template and the instruction, put token-id pairs into the same template,
// and truncation keeps the suffix.
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "io/builtins.h"
#include "io/model_context.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {
namespace {

const std::string kFixtures = SLUICE_FIXTURES_DIR;

class CausalReranker : public ::testing::Test {
 protected:
  void SetUp() override {
    EngineOptions o;
    o.model_dir = kFixtures + "/models/qwen3_reranker";
    o.backend.num_threads = 1;
    auto e = Engine::Load(o);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    engine_ = std::move(e).value();
    auto t = Tokenizer::FromDirectory(kFixtures + "/tokenizers/qwen2");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tok_ = std::move(t).value();
    ContextOptions co;
    co.served_name = "rr";
    auto m = BuildModelContext(*engine_, tok_.get(), co);
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    m_ = std::move(m).value();
  }

  std::vector<int32_t> Enc(const std::string& s) { return tok_->Encode(s, false)->ids; }

  StatusOr<std::vector<TokenSequence>> Run(const std::string& body) {
    const IoProcessor* p = reg_.Find("/v1/rerank");
    ASSIGN_OR_RETURN(auto st, p->Parse(IoRequest{"/v1/rerank", body, &m_}));
    std::vector<TokenSequence> seqs;
    RETURN_IF_ERROR(p->PreProcess(m_, *st, &seqs));
    return seqs;
  }

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Tokenizer> tok_;
  ModelContext m_;
  ProcessorRegistry reg_;
};

TEST_F(CausalReranker, RendersTheTemplateWithTheInstruction) {
  ASSERT_TRUE(m_.causal_reranker);
  EXPECT_EQ(m_.prompt_prefix.front(), *tok_->TokenToId("<|im_start|>"));
  EXPECT_EQ(m_.default_instruction,
            "Given a web search query, retrieve relevant passages that answer the query");
  m_.max_tokens_per_input = 100000;  // the fixture allows 128; this tokenizer is tiny
  auto seqs = Run(R"({"query": "what is a sluice", "documents": ["a gate for water"]})");
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  std::vector<int32_t> want = m_.prompt_prefix;
  for (int32_t id : Enc("<Instruct>: " + m_.default_instruction +
                        "\n<Query>: what is a sluice\n<Document>: a gate for water")) {
    want.push_back(id);
  }
  want.insert(want.end(), m_.prompt_suffix.begin(), m_.prompt_suffix.end());
  EXPECT_EQ((*seqs)[0].ids, want);
  EXPECT_TRUE((*seqs)[0].type_ids.empty());

  auto custom = Run(R"({"query": "q", "documents": ["d"], "instruction": "Find code"})");
  ASSERT_TRUE(custom.ok());
  std::vector<int32_t> mid = Enc("<Instruct>: Find code\n<Query>: q\n<Document>: d");
  EXPECT_EQ((*custom)[0].ids.size(),
            m_.prompt_prefix.size() + mid.size() + m_.prompt_suffix.size());
}

TEST_F(CausalReranker, TruncationKeepsTheSuffix) {
  m_.max_tokens_per_input =
      static_cast<int>(m_.prompt_prefix.size() + m_.prompt_suffix.size()) + 12;
  const std::string doc(2000, 'x');
  auto over = Run(R"({"query": "q", "documents": [")" + doc + R"("]})");
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  auto cut =
      Run(R"({"query": "q", "documents": [")" + doc + R"("], "truncate_prompt_tokens": -1})");
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  const auto& ids = (*cut)[0].ids;
  EXPECT_EQ(ids.size(), static_cast<size_t>(m_.max_tokens_per_input));
  EXPECT_TRUE(std::equal(m_.prompt_suffix.rbegin(), m_.prompt_suffix.rend(), ids.rbegin()));
}

TEST_F(CausalReranker, TokenIdPairsGetTheTemplate) {
  m_.max_tokens_per_input = 100000;
  auto seqs = Run(R"({"query": [11, 12, 13], "documents": [[21, 22], [23]]})");
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  ASSERT_EQ(seqs->size(), 2u);
  auto want = [&](const std::string& instruction, std::vector<int32_t> q, std::vector<int32_t> d) {
    std::vector<int32_t> w = m_.prompt_prefix;
    for (const auto& part :
         {Enc("<Instruct>: " + instruction + "\n<Query>: "), q, Enc("\n<Document>: "), d}) {
      w.insert(w.end(), part.begin(), part.end());
    }
    w.insert(w.end(), m_.prompt_suffix.begin(), m_.prompt_suffix.end());
    return w;
  };
  EXPECT_EQ((*seqs)[0].ids, want(m_.default_instruction, {11, 12, 13}, {21, 22}));
  EXPECT_EQ((*seqs)[1].ids, want(m_.default_instruction, {11, 12, 13}, {23}));
  auto custom = Run(R"({"query": [11], "documents": [[21]], "instruction": "Find code"})");
  ASSERT_TRUE(custom.ok()) << custom.status().ToString();
  EXPECT_EQ((*custom)[0].ids, want("Find code", {11}, {21}));
  // /score takes the same path.
  const IoProcessor* p = reg_.Find("/score");
  auto st = p->Parse(IoRequest{"/score", R"({"text_1": [11], "text_2": [21]})", &m_});
  ASSERT_TRUE(st.ok());
  std::vector<TokenSequence> score_seqs;
  ASSERT_TRUE(p->PreProcess(m_, **st, &score_seqs).ok());
  EXPECT_EQ(score_seqs[0].ids, want(m_.default_instruction, {11}, {21}));
  // Mixing text and ids is refused.
  EXPECT_FALSE(Run(R"({"query": "q", "documents": [[21]]})").ok());
}

TEST_F(CausalReranker, TokenIdTruncationKeepsTheSuffix) {
  const size_t head = m_.prompt_prefix.size() + m_.prompt_query_head.size();
  m_.max_tokens_per_input =
      static_cast<int>(head + 2 + m_.prompt_document_head.size() + 3 + m_.prompt_suffix.size());
  std::string doc = "[";
  for (int i = 0; i < 50; ++i) doc += (i ? "," : "") + std::to_string(30 + i);
  doc += "]";
  auto over = Run(R"({"query": [11, 12], "documents": [)" + doc + "]}");
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  auto cut =
      Run(R"({"query": [11, 12], "documents": [)" + doc + R"(], "truncate_prompt_tokens": -1})");
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  const auto& ids = (*cut)[0].ids;
  ASSERT_EQ(ids.size(), static_cast<size_t>(m_.max_tokens_per_input));
  EXPECT_TRUE(std::equal(m_.prompt_suffix.rbegin(), m_.prompt_suffix.rend(), ids.rbegin()));
  // The document keeps its first 3 tokens; the query is whole.
  const size_t suffix_at = ids.size() - m_.prompt_suffix.size();
  EXPECT_EQ(std::vector<int32_t>(ids.begin() + static_cast<long>(suffix_at) - 3,
                                 ids.begin() + static_cast<long>(suffix_at)),
            (std::vector<int32_t>{30, 31, 32}));
  EXPECT_EQ(ids[head], 11);
  EXPECT_EQ(ids[head + 1], 12);
}

TEST_F(CausalReranker, InstructionRefusedForCrossEncoders) {
  m_.causal_reranker = false;
  auto r = Run(R"({"query": "q", "documents": ["d"], "instruction": "x"})");
  EXPECT_NE(r.status().message().find("instruction"), std::string::npos);
}

}  // namespace
}  // namespace sluice::io
