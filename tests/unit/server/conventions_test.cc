// The scoring and embedding routes' conventions (src/io/score.cc, embed.cc, json.cc,
// model_context.cc), each a defect found from outside: pair templates from the tokenizer's
// post-processor, empty documents, top_n, documents echoed as text, the over-long query,
// duplicate JSON keys, normalisation, /pooling tasks, Cohere v2, token classification and
// aspect-sentiment request checks, Bearer auth and the log limiter.
#include <gtest/gtest.h>

#include <cmath>

#include "core/log.h"
#include "engine/engine.h"
#include "io/builtins.h"
#include "io/inputs.h"
#include "io/model_context.h"
#include "server/auth.h"
#include "tokenizer/tokenizer.h"

namespace sluice::io {
namespace {

const std::string kFixtures = SLUICE_FIXTURES_DIR;
const std::string kDemo = kFixtures + "/../../models/demo-reranker";

std::unique_ptr<Tokenizer> LoadTokenizer(const std::string& dir) {
  auto t = Tokenizer::FromDirectory(dir);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return t.ok() ? std::move(t).value() : nullptr;
}

// The context of a fixture model with a tokenizer from elsewhere (fixture models have none).
ModelContext Context(const std::string& model, const Tokenizer* tok) {
  EngineOptions o;
  o.model_dir = model;
  o.backend.num_threads = 1;
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << e.status().ToString();
  ContextOptions co;
  co.served_name = "m";
  auto m = BuildModelContext(**e, tok, co);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

struct Run {
  Status status;
  std::vector<TokenSequence> seqs;
  std::unique_ptr<IoState> state;
};

Run Pre(const ProcessorRegistry& reg, const ModelContext& m, const std::string& route,
        const std::string& body) {
  Run r;
  const IoProcessor* p = reg.FindRoute(route);
  auto st = p->Parse(IoRequest{route, body, &m});
  if (!st.ok()) {
    r.status = st.status();
    return r;
  }
  r.state = std::move(st).value();
  r.status = p->PreProcess(m, *r.state, &r.seqs);
  return r;
}

std::string Ids(const std::vector<int32_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? "," : "") + std::to_string(ids[i]);
  return s + "]";
}

// RoBERTa and XLM-R pairs given as token ids get <s> a </s></s> b </s>, the tokenizer's own
// template (they used to be joined bare: their family is "roberta", not "bert").
TEST(Conventions, TokenIdPairsGetTheTokenizersTemplate) {
  ProcessorRegistry reg;
  for (const char* name : {"roberta", "xlmr", "bert_cased"}) {
    auto tok = LoadTokenizer(kFixtures + "/tokenizers/" + name);
    ASSERT_NE(tok, nullptr);
    const std::string model =
        std::string(name) == "bert_cased" ? "bert_cross_encoder" : "roberta_cross_encoder";
    ModelContext m = Context(kFixtures + "/models/" + model, tok.get());
    m.max_tokens_per_input = m.model_max_tokens = 100000;
    const std::string q = "what is a sluice", d = "a gate that holds water";
    auto text = Pre(reg, m, "/score", R"({"text_1": ")" + q + R"(", "text_2": ")" + d + R"("})");
    auto ids = Pre(reg, m, "/score",
                   R"({"text_1": )" + Ids(tok->Encode(q, false)->ids) + R"(, "text_2": )" +
                       Ids(tok->Encode(d, false)->ids) + "}");
    ASSERT_TRUE(text.status.ok()) << text.status.ToString();
    ASSERT_TRUE(ids.status.ok()) << ids.status.ToString();
    EXPECT_EQ(ids.seqs[0].ids, text.seqs[0].ids) << name;
    EXPECT_EQ(ids.seqs[0].type_ids, text.seqs[0].type_ids) << name;
  }
}

// An empty document is scored; an empty query and empty embedding inputs are refused.
TEST(Conventions, EmptyDocumentsAreScored) {
  ProcessorRegistry reg;
  auto tok = LoadTokenizer(kDemo);
  ModelContext m = Context(kDemo, tok.get());
  auto rr = Pre(reg, m, "/v1/rerank",
                R"({"query": "salmon", "documents": ["", "salmon", {"text": ""}]})");
  ASSERT_TRUE(rr.status.ok()) << rr.status.ToString();
  ASSERT_EQ(rr.seqs.size(), 3u);
  EXPECT_EQ(rr.seqs[0].ids, rr.seqs[2].ids);  // [CLS] salmon [SEP] [SEP]
  const auto q_ids = tok->Encode("salmon", false)->ids;
  auto ids = Pre(reg, m, "/v1/rerank", R"({"query": )" + Ids(q_ids) + R"(, "documents": [[]]})");
  ASSERT_TRUE(ids.status.ok()) << ids.status.ToString();
  EXPECT_EQ(ids.seqs[0].ids, rr.seqs[0].ids);
  EXPECT_TRUE(Pre(reg, m, "/score", R"({"text_1": "q", "text_2": ["", "d"]})").status.ok());
  EXPECT_TRUE(Pre(reg, m, "/v2/rerank", R"({"query": "q", "documents": [""]})").status.ok());
  auto q = Pre(reg, m, "/v1/rerank", R"({"query": "", "documents": ["d"]})");
  EXPECT_EQ(q.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(q.status.message().find("query"), std::string::npos);
}

TEST(Conventions, TopNIsAtLeastOne) {
  ProcessorRegistry reg;
  auto tok = LoadTokenizer(kDemo);
  ModelContext m = Context(kDemo, tok.get());
  for (const char* route : {"/v1/rerank", "/v2/rerank"}) {
    for (const char* bad : {"0", "-1", "-5"}) {
      auto r = Pre(reg, m, route,
                   std::string(R"({"query": "q", "documents": ["a"], "top_n": )") + bad + "}");
      EXPECT_EQ(r.status.code(), StatusCode::kInvalidArgument) << route << " " << bad;
      EXPECT_NE(r.status.message().find("top_n"), std::string::npos);
    }
    EXPECT_TRUE(
        Pre(reg, m, route, R"({"query": "q", "documents": ["a"], "top_n": 5})").status.ok());
  }
}

// Token-id documents echo as their decoded text: {"text": "..."}, never a list.
TEST(Conventions, TokenIdDocumentsEchoAsText) {
  ProcessorRegistry reg;
  auto tok = LoadTokenizer(kDemo);
  ModelContext m = Context(kDemo, tok.get());
  const auto d = tok->Encode("salmon swim", false)->ids;
  auto r = Pre(reg, m, "/v1/rerank", R"({"query": [5], "documents": [)" + Ids(d) + "]}");
  ASSERT_TRUE(r.status.ok()) << r.status.ToString();
  std::vector<PooledOutput> outs(1);
  outs[0].values = {0.5f};
  auto resp = reg.FindRoute("/v1/rerank")->PostProcess(m, *r.state, outs);
  ASSERT_TRUE(resp.ok());
  EXPECT_NE(resp->body.find(R"("document":{"text":"salmon swim"})"), std::string::npos)
      << resp->body;
}

TEST(Conventions, OverLongQueryIsReportedAsTheQuery) {
  ProcessorRegistry reg;
  auto tok = LoadTokenizer(kDemo);
  ModelContext m = Context(kDemo, tok.get());
  m.max_tokens_per_input = 8;
  const std::string long_q = "salmon swim up the cold river every spring";
  for (const char* extra : {"", R"(, "truncate_prompt_tokens": -1)"}) {
    auto r = Pre(reg, m, "/v1/rerank",
                 R"({"query": ")" + long_q + R"(", "documents": ["a", "b"])" + extra + "}");
    EXPECT_EQ(r.status.code(), StatusCode::kOutOfRange) << extra;
    EXPECT_NE(r.status.message().find("\"query\""), std::string::npos) << r.status.message();
    EXPECT_EQ(r.status.message().find("documents["), std::string::npos) << r.status.message();
  }
  auto ids = Pre(reg, m, "/score", R"({"text_1": [5,6,7,8,9,10,11], "text_2": [5]})");
  EXPECT_NE(ids.status.message().find("\"text_1\""), std::string::npos) << ids.status.message();
  // A document that does not fit is still named as the document.
  auto doc =
      Pre(reg, m, "/v1/rerank", R"({"query": "salmon", "documents": ["a", ")" + long_q + R"("]})");
  EXPECT_NE(doc.status.message().find("documents[1]"), std::string::npos) << doc.status.message();
}

TEST(Conventions, DuplicateKeysAreRefused) {
  ProcessorRegistry reg;
  auto tok = LoadTokenizer(kDemo);
  ModelContext m = Context(kDemo, tok.get());
  auto top = Pre(reg, m, "/v1/rerank", R"({"query": "a", "query": "b", "documents": ["d"]})");
  EXPECT_EQ(top.status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(top.status.message().find("\"query\" appears more than once"), std::string::npos)
      << top.status.message();
  auto nested =
      Pre(reg, m, "/v1/rerank", R"({"query": "a", "documents": [{"text": "x", "text": "y"}]})");
  EXPECT_NE(nested.status.message().find("documents[0].text"), std::string::npos)
      << nested.status.message();
}

// Cohere v2: strings only, max_tokens_per_doc cuts documents, a v2 response.
TEST(Conventions, CohereV2Rerank) {
  ProcessorRegistry reg;
  auto tok = LoadTokenizer(kDemo);
  ModelContext m = Context(kDemo, tok.get());
  const std::string doc = "salmon swim up the cold river every spring";
  auto full = Pre(reg, m, "/v2/rerank", R"({"query": "salmon", "documents": [")" + doc + R"("]})");
  auto cut = Pre(reg, m, "/v2/rerank",
                 R"({"model": "m", "query": "salmon", "documents": [")" + doc +
                     R"("], "max_tokens_per_doc": 3, "top_n": 1})");
  ASSERT_TRUE(full.status.ok() && cut.status.ok()) << cut.status.ToString();
  const size_t q = tok->Encode("salmon", true)->size();  // [CLS] salmon [SEP]
  EXPECT_EQ(cut.seqs[0].ids.size(), q + 3 + 1);
  EXPECT_GT(full.seqs[0].ids.size(), cut.seqs[0].ids.size());
  EXPECT_EQ(
      Pre(reg, m, "/v2/rerank", R"({"query": "q", "documents": [{"text": "d"}]})").status.code(),
      StatusCode::kInvalidArgument);
  EXPECT_EQ(
      Pre(reg, m, "/v2/rerank", R"({"query": "q", "documents": ["d"], "return_documents": true})")
          .status.code(),
      StatusCode::kInvalidArgument);
  std::vector<PooledOutput> outs(1);
  outs[0].values = {0.75f};
  auto resp = reg.FindRoute("/v2/rerank")->PostProcess(m, *cut.state, outs);
  ASSERT_TRUE(resp.ok());
  EXPECT_EQ(resp->body.rfind(R"({"id":"rerank-)", 0), 0u) << resp->body;
  EXPECT_NE(
      resp->body.find(
          R"("results":[{"index":0,"relevance_score":0.75}],"meta":{"api_version":{"version":"2"})"),
      std::string::npos)
      << resp->body;
}

TEST(Conventions, EmbeddingsNormaliseByDefault) {
  ProcessorRegistry reg;
  ModelContext m;
  m.name = "m";
  m.task = "embed";
  m.output_dim = 2;
  m.model_max_tokens = m.max_tokens_per_input = 16;
  auto body = [&](const std::string& route, const std::string& req) {
    auto r = Pre(reg, m, route, req);
    EXPECT_TRUE(r.status.ok()) << r.status.ToString();
    std::vector<PooledOutput> outs(1);
    outs[0].values = {3.f, 4.f};
    return reg.FindRoute(route)->PostProcess(m, *r.state, outs)->body;
  };
  for (const char* route : {"/v1/embeddings", "/pooling"}) {
    EXPECT_NE(body(route, R"({"input": [1]})").find("[0.6,0.8]"), std::string::npos) << route;
    EXPECT_NE(body(route, R"({"input": [1], "normalize": false})").find("[3,4]"), std::string::npos)
        << route;
  }
  EXPECT_NE(body("/embed", R"({"inputs": [1]})").find("[[0.6,0.8]]"), std::string::npos);
  m.normalize = false;  // sluice.json "normalize": false
  EXPECT_NE(body("/v1/embeddings", R"({"input": [1]})").find("[3,4]"), std::string::npos);
  EXPECT_NE(body("/embed", R"({"inputs": [1]})").find("[[3,4]]"), std::string::npos);
  EXPECT_NE(body("/v1/embeddings", R"({"input": [1], "normalize": true})").find("[0.6,0.8]"),
            std::string::npos);
  EXPECT_EQ(Pre(reg, m, "/v1/embeddings", R"({"input": [1], "normalize": 1})").status.code(),
            StatusCode::kInvalidArgument);
  m.task = "classify";
  auto c = Pre(reg, m, "/pooling", R"({"input": [1], "normalize": true})");
  EXPECT_NE(c.status.message().find("normalize"), std::string::npos) << c.status.message();
}

TEST(Conventions, PoolingTaskMustBeTheModels) {
  ProcessorRegistry reg;
  ModelContext m;
  m.name = "m";
  m.model_max_tokens = m.max_tokens_per_input = 16;
  const std::pair<const char*, const char*> cases[] = {
      {"embed", "embed"}, {"classify", "classify"}, {"token-classify", "token_classify"}};
  for (const auto& [task, pooling] : cases) {
    m.task = task;
    m.token_level = std::string(task) == "token-classify";
    EXPECT_TRUE(
        Pre(reg, m, "/pooling", std::string(R"({"input": [1], "task": ")") + pooling + "\"}")
            .status.ok())
        << task;
    auto bad = Pre(reg, m, "/pooling", R"({"input": [1], "task": "token_embed"})");
    EXPECT_EQ(bad.status.code(), StatusCode::kInvalidArgument) << task;
    EXPECT_NE(bad.status.message().find(pooling), std::string::npos) << bad.status.message();
  }
}

TEST(Conventions, TokenClassifyAndAbsaRequests) {
  ProcessorRegistry reg;
  const std::string dir = kFixtures + "/token_classification/bert_wordpiece_ko/model";
  auto tok = LoadTokenizer(dir);
  ModelContext m = Context(dir, tok.get());
  EXPECT_EQ(m.task, "token-classify");
  auto err = [&](const std::string& route, const std::string& body) {
    return Pre(reg, m, route, body).status;
  };
  EXPECT_TRUE(
      err("/token-classify", R"({"inputs": ["a b", "c"], "aggregation_strategy": "first"})").ok());
  EXPECT_NE(err("/token-classify", R"({"inputs": "a", "aggregation_strategy": "best"})")
                .message()
                .find("aggregation_strategy"),
            std::string::npos);
  EXPECT_NE(err("/token-classify", R"({"inputs": "a", "ignore_labels": "O"})")
                .message()
                .find("ignore_labels"),
            std::string::npos);
  EXPECT_NE(err("/token-classify", R"({"inputs": ["a", "b"], "text_pair": "c"})")
                .message()
                .find("text_pair"),
            std::string::npos);
  EXPECT_NE(err("/token-classify", R"({"inputs": "a", "stride": 2})").message().find("stride"),
            std::string::npos);
  EXPECT_NE(err("/token-classify", R"({"inputs": [1, 2]})").message().find("inputs"),
            std::string::npos);
  // /absa needs sluice.json "absa"; then it checks its fields.
  EXPECT_EQ(err("/absa", R"({"review": "good food", "aspects": ["food"]})").code(),
            StatusCode::kFailedPrecondition);
  m.absa = true;
  m.absa_max_aspects = 2;
  EXPECT_TRUE(err("/absa", R"({"review": "good food", "aspects": ["food"]})").ok());
  EXPECT_NE(
      err("/absa", R"({"review": "x", "aspects": ["a", "b", "c"]})").message().find("max_aspects"),
      std::string::npos);
  EXPECT_NE(err("/absa", R"({"review": "", "aspects": ["a"]})").message().find("review"),
            std::string::npos);
  EXPECT_NE(err("/absa", R"({"review": "x", "aspects": []})").message().find("aspects"),
            std::string::npos);
  EXPECT_NE(
      err("/absa", R"({"review": "x", "aspects": ["a"], "lang": "ko"})").message().find("lang"),
      std::string::npos);
  // A model that classifies sequences is refused by /token-classify.
  m.task = "classify";
  EXPECT_EQ(err("/token-classify", R"({"inputs": "a"})").code(), StatusCode::kFailedPrecondition);
}

TEST(Auth, BearerSchemeIsCaseInsensitive) {
  using server::BearerMatches;
  for (const char* h : {"Bearer sekret", "bearer sekret", "BEARER sekret", "BeArEr  sekret",
                        "Bearer\tsekret", " Bearer sekret "}) {
    EXPECT_TRUE(BearerMatches(h, "sekret")) << h;
  }
  for (const char* h : {"", "Bearer", "Bearer ", "Bearersekret", "Basic sekret", "Bearer sekre",
                        "Bearer sekret2", "Bearer Sekret", "Token sekret"}) {
    EXPECT_FALSE(BearerMatches(h, "sekret")) << h;
  }
  EXPECT_TRUE(server::ConstantTimeEquals("abc", "abc"));
  EXPECT_FALSE(server::ConstantTimeEquals("abd", "abc"));
  EXPECT_FALSE(server::ConstantTimeEquals("ab", "abc"));
  EXPECT_FALSE(server::ConstantTimeEquals("abcd", "abc"));
  EXPECT_FALSE(server::ConstantTimeEquals("", "abc"));
}

TEST(LogLimiter, OneLinePerIntervalAndCountsTheRest) {
  LogLimiter l(1.0);
  int64_t dropped = -1;
  EXPECT_TRUE(l.AllowAt(10.0, &dropped));
  EXPECT_EQ(dropped, 0);
  for (int i = 0; i < 1000; ++i) EXPECT_FALSE(l.AllowAt(10.0 + i * 0.0005, &dropped));
  EXPECT_TRUE(l.AllowAt(11.0, &dropped));
  EXPECT_EQ(dropped, 1000);
  EXPECT_FALSE(l.AllowAt(11.5, &dropped));
  EXPECT_TRUE(l.AllowAt(12.5, &dropped));
  EXPECT_EQ(dropped, 1);
}

}  // namespace
}  // namespace sluice::io
