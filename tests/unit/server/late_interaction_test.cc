// Late interaction (ColBERT) queries: query augmentation pads each query, text or token ids,
// with the mask token to the query length (documents never), refuses longer queries unless
// truncation is asked for, and is off when query_length is 0.
#include <gtest/gtest.h>

#include "io/builtins.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {
namespace {

class LateInteraction : public ::testing::Test {
 protected:
  void SetUp() override {
    auto t =
        Tokenizer::FromDirectory(std::string(SLUICE_FIXTURES_DIR) + "/../../models/demo-reranker");
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    tok_ = std::move(t).value();
    m_.name = "colbert";
    m_.task = "score";
    m_.late_interaction = true;
    m_.tokenizer = tok_.get();
    m_.model_max_tokens = m_.max_tokens_per_input = 64;
    m_.max_inputs_per_request = 100;
    m_.query_prefix = "q: ";
    m_.query_length = 12;
    m_.query_mask_id = *tok_->TokenToId("[MASK]");
  }

  StatusOr<std::vector<TokenSequence>> Run(const std::string& body) {
    const IoProcessor* p = reg_.FindRoute("/score");
    ASSIGN_OR_RETURN(auto st, p->Parse(IoRequest{"/score", body, &m_}));
    std::vector<TokenSequence> seqs;
    RETURN_IF_ERROR(p->PreProcess(m_, *st, &seqs));
    return seqs;
  }

  std::vector<int32_t> Padded(std::vector<int32_t> ids) {
    ids.resize(static_cast<size_t>(m_.query_length), m_.query_mask_id);
    return ids;
  }

  ProcessorRegistry reg_;
  std::unique_ptr<Tokenizer> tok_;
  ModelContext m_;
};

TEST_F(LateInteraction, QueriesArePaddedWithTheMaskTokenDocumentsAreNot) {
  auto seqs = Run(R"({"text_1": "salmon river", "text_2": ["salmon swim", "traders"]})");
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  ASSERT_EQ(seqs->size(), 3u);  // the query once, then each document
  const auto q = tok_->Encode("q: salmon river")->ids;
  ASSERT_LT(q.size(), 12u);
  EXPECT_EQ((*seqs)[0].ids, Padded(q));
  EXPECT_EQ((*seqs)[0].ids.back(), m_.query_mask_id);
  EXPECT_EQ((*seqs)[1].ids, tok_->Encode("salmon swim")->ids);
  EXPECT_EQ((*seqs)[2].ids, tok_->Encode("traders")->ids);
  // Token ids are padded the same way; ids already at the query length are kept as given.
  seqs = Run(R"({"text_1": [2, 40, 41, 3], "text_2": [[2, 50, 3]]})");
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  EXPECT_EQ((*seqs)[0].ids, Padded({2, 40, 41, 3}));
  EXPECT_EQ((*seqs)[1].ids, (std::vector<int32_t>{2, 50, 3}));
  auto explicit_pad = Run(R"({"text_1": [2, 40, 41, 3, 4, 4, 4, 4, 4, 4, 4, 4],
                              "text_2": [[2, 50, 3]]})");
  ASSERT_TRUE(explicit_pad.ok());
  EXPECT_EQ((*explicit_pad)[0].ids, (*seqs)[0].ids);
}

TEST_F(LateInteraction, LongQueriesAreRefusedUnlessTruncationIsAsked) {
  const std::string words = "salmon river salmon river salmon river salmon river salmon river";
  auto seqs = Run(R"({"text_1": ")" + words + R"(", "text_2": ["d"]})");
  ASSERT_FALSE(seqs.ok());
  EXPECT_EQ(seqs.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(seqs.status().message().find("query length of 12"), std::string::npos)
      << seqs.status().message();
  seqs = Run(R"({"text_1": ")" + words + R"(", "text_2": ["d"], "truncate_prompt_tokens": -1})");
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  TruncationParams tp;
  tp.max_length = 12;
  EXPECT_EQ((*seqs)[0].ids, tok_->Encode("q: " + words, true, &tp)->ids);
  EXPECT_EQ((*seqs)[0].ids.back(), *tok_->TokenToId("[SEP]"));  // special tokens kept
}

TEST_F(LateInteraction, NoQueryLengthNoAugmentation) {
  m_.query_length = 0;
  auto seqs = Run(R"({"text_1": "salmon river", "text_2": ["d"]})");
  ASSERT_TRUE(seqs.ok()) << seqs.status().ToString();
  EXPECT_EQ((*seqs)[0].ids, tok_->Encode("q: salmon river")->ids);
}

}  // namespace
}  // namespace sluice::io
