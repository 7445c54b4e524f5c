// Causal-LM reranker prompts (Qwen3-Reranker): the score/rerank processors render text
// pairs with the template and the instruction, decode token-id pairs and render them the same
// way (the ids of /tokenize give the text's sequence), and truncation keeps the suffix.
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
    const IoProcessor* p = reg_.FindRoute("/v1/rerank");
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

// Tokens of the template before the document ("<Instruct>: ...\n<Query>: q\n<Document>: ").
size_t HeadTokens(const Tokenizer& tok, const ModelContext& m, const std::string& q) {
  return tok
      .Encode("<Instruct>: " + m.default_instruction + "\n<Query>: " + q + "\n<Document>: ", false)
      ->size();
}

TEST_F(CausalReranker, TruncationKeepsTheSuffix) {
  m_.max_tokens_per_input = static_cast<int>(m_.prompt_prefix.size() + m_.prompt_suffix.size() +
                                             HeadTokens(*tok_, m_, "q")) +
                            12;
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

// Token ids (as /tokenize returns them for the query and each document) give exactly the
// sequences of the texts: "<Query>: " ends in a space that byte-level BPE merges into the
// query's first word, so splicing the query's own tokens after the template's would not.
TEST_F(CausalReranker, TokenIdPairsGiveTheTextSequences) {
  m_.max_tokens_per_input = 100000;
  auto ids = [&](const std::string& s) {
    std::string out = "[";
    for (int32_t id : Enc(s)) out += (out.size() > 1 ? "," : "") + std::to_string(id);
    return out + "]";
  };
  const std::string q = "what is a sluice", d1 = "a gate for water", d2 = "salmon";
  auto text = Run(R"({"query": ")" + q + R"(", "documents": [")" + d1 + R"(", ")" + d2 + R"("]})");
  auto tok = Run(R"({"query": )" + ids(q) + R"(, "documents": [)" + ids(d1) + "," + ids(d2) + "]}");
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  ASSERT_TRUE(tok.ok()) << tok.status().ToString();
  ASSERT_EQ(tok->size(), 2u);
  EXPECT_EQ((*tok)[0].ids, (*text)[0].ids);
  EXPECT_EQ((*tok)[1].ids, (*text)[1].ids);
  // Splicing the ids into the template's tokens differs: the template's trailing space.
  std::vector<int32_t> spliced = m_.prompt_prefix;
  for (const auto& part : {Enc("<Instruct>: " + m_.default_instruction + "\n<Query>: "), Enc(q),
                           Enc("\n<Document>: "), Enc(d1)}) {
    spliced.insert(spliced.end(), part.begin(), part.end());
  }
  spliced.insert(spliced.end(), m_.prompt_suffix.begin(), m_.prompt_suffix.end());
  EXPECT_NE((*tok)[0].ids, spliced);
  // A custom instruction, and /score, take the same path.
  auto ci = Run(R"({"query": )" + ids(q) + R"(, "documents": [)" + ids(d1) +
                R"(], "instruction": "Find code"})");
  auto ct = Run(R"({"query": ")" + q + R"(", "documents": [")" + d1 +
                R"("], "instruction": "Find code"})");
  ASSERT_TRUE(ci.ok() && ct.ok());
  EXPECT_EQ((*ci)[0].ids, (*ct)[0].ids);
  const IoProcessor* p = reg_.FindRoute("/score");
  auto st = p->Parse(
      IoRequest{"/score", R"({"text_1": )" + ids(q) + R"(, "text_2": )" + ids(d1) + "}", &m_});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  std::vector<TokenSequence> score_seqs;
  ASSERT_TRUE(p->PreProcess(m_, **st, &score_seqs).ok());
  EXPECT_EQ(score_seqs[0].ids, (*text)[0].ids);
  // Mixing text and ids is refused.
  EXPECT_FALSE(Run(R"({"query": "q", "documents": [[21]]})").ok());
}

TEST_F(CausalReranker, TokenIdTruncationKeepsTheSuffix) {
  std::string doc_text;
  for (int i = 0; i < 60; ++i) doc_text += " word" + std::to_string(i);
  std::string doc = "[";
  for (int32_t id : Enc(doc_text)) doc += (doc.size() > 1 ? "," : "") + std::to_string(id);
  doc += "]";
  const std::string q = *tok_->Decode(std::vector<int32_t>{11, 12}, false);
  m_.max_tokens_per_input = static_cast<int>(m_.prompt_prefix.size() + m_.prompt_suffix.size() +
                                             HeadTokens(*tok_, m_, q)) +
                            20;
  auto over = Run(R"({"query": [11, 12], "documents": [)" + doc + "]}");
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  auto cut =
      Run(R"({"query": [11, 12], "documents": [)" + doc + R"(], "truncate_prompt_tokens": -1})");
  ASSERT_TRUE(cut.ok()) << cut.status().ToString();
  const auto& ids = (*cut)[0].ids;
  ASSERT_EQ(ids.size(), static_cast<size_t>(m_.max_tokens_per_input));
  EXPECT_TRUE(std::equal(m_.prompt_suffix.rbegin(), m_.prompt_suffix.rend(), ids.rbegin()));
}

// A query that leaves no room for a document is reported as the query, not a document.
TEST_F(CausalReranker, OverLongQueryIsNamed) {
  m_.max_tokens_per_input =
      static_cast<int>(m_.prompt_prefix.size() + m_.prompt_suffix.size()) + 30;
  std::string q;
  for (int i = 0; i < 40; ++i) q += " word" + std::to_string(i);
  auto r =
      Run(R"({"query": ")" + q + R"(", "documents": ["a", "b"], "truncate_prompt_tokens": -1})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("\"query\""), std::string::npos) << r.status().message();
  EXPECT_EQ(r.status().message().find("documents["), std::string::npos) << r.status().message();
}

TEST_F(CausalReranker, InstructionRefusedForCrossEncoders) {
  m_.causal_reranker = false;
  auto r = Run(R"({"query": "q", "documents": ["d"], "instruction": "x"})");
  EXPECT_NE(r.status().message().find("instruction"), std::string::npos);
}

}  // namespace
}  // namespace sluice::io
