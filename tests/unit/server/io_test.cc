// IO layer without an engine: JSON writer, field readers, inputs, pair assembly and
// truncation, and the built-in processors' parse/post-process on a hand-made context.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "io/builtins.h"
#include "io/inputs.h"
#include "io/json.h"

namespace sluice::io {
namespace {

TEST(JsonWriter, WritesNestedValuesWithCommas) {
  JsonWriter w;
  w.BeginObject();
  w.Key("a");
  w.Int(-3);
  w.Key("b");
  w.BeginArray();
  w.Float(0.1f);
  w.Float(1e30f);
  w.Float(NAN);
  w.Bool(true);
  w.Null();
  w.EndArray();
  w.Key("s\"q");
  w.String("x\n\x01\\");
  w.Key("e");
  w.BeginObject();
  w.EndObject();
  w.EndObject();
  EXPECT_EQ(w.str(), R"({"a":-3,"b":[0.1,1e+30,null,true,null],"s\"q":"x\n\u0001\\","e":{}})");
}

TEST(JsonWriter, FloatsRoundTrip) {
  for (float v : {0.40135372f, 1.0f / 3, -7.5e-12f, 123456.79f}) {
    JsonWriter w;
    w.Float(v);
    EXPECT_EQ(std::strtof(w.str().c_str(), nullptr), v) << w.str();
  }
}

TEST(Base64, MatchesRfc4648) {
  EXPECT_EQ(Base64("", 0), "");
  EXPECT_EQ(Base64("f", 1), "Zg==");
  EXPECT_EQ(Base64("fo", 2), "Zm8=");
  EXPECT_EQ(Base64("foo", 3), "Zm9v");
  EXPECT_EQ(Base64("foobar", 6), "Zm9vYmFy");
}

TEST(Fields, NamesWrongTypesAndUnknownFields) {
  auto obj = ParseObject(R"({"a": "x", "b": 3, "c": true})");
  ASSERT_TRUE(obj.ok());
  Fields f(*obj, "");
  int64_t n = 0;
  Status s = f.GetInt("a", &n);
  EXPECT_NE(s.message().find("\"a\" must be an integer"), std::string::npos) << s.message();
  EXPECT_TRUE(f.GetInt("b", &n).ok());
  EXPECT_EQ(n, 3);
  Status u = f.CheckNoUnknown();
  EXPECT_NE(u.message().find("\"c\""), std::string::npos) << u.message();
  EXPECT_FALSE(ParseObject("[1]").ok());
  EXPECT_FALSE(ParseObject("{\"a\": \"\\ud800\"}").ok());  // lone surrogate
  EXPECT_FALSE(ParseObject(std::string(5000, '[')).ok());
}

ModelContext Ctx() {
  ModelContext m;
  m.name = "m";
  m.task = "score";
  m.uses_token_types = true;
  m.model_max_tokens = 10;
  m.max_tokens_per_input = 10;
  m.max_inputs_per_request = 4;
  m.pair_prefix = {101};
  m.pair_separator = {102};
  m.pair_suffix = {102};
  m.pair_prefix_types = {0};
  m.pair_separator_types = {0};
  m.pair_suffix_types = {1};
  return m;
}

TEST(Inputs, ReadsEveryShape) {
  auto obj = ParseObject(R"({"a": "t", "b": ["t", "u"], "c": [1, 2], "d": [[1], [2, 3]],
                             "e": [], "f": [""], "g": [1, -1], "h": [[1], "x", 2]})");
  ASSERT_TRUE(obj.ok());
  auto get = [&](const char* k) { return ReadItems((*obj)[k].value(), k); };
  EXPECT_EQ(get("a")->size(), 1u);
  EXPECT_EQ(get("b")->size(), 2u);
  ASSERT_EQ(get("c")->size(), 1u);
  EXPECT_TRUE((*get("c"))[0].is_ids);
  EXPECT_EQ(get("d")->size(), 2u);
  EXPECT_FALSE(get("e").ok());
  EXPECT_NE(get("f").status().message().find("f[0]"), std::string::npos);
  EXPECT_NE(get("g").status().message().find("g[1]"), std::string::npos);
  EXPECT_NE(get("h").status().message().find("h[2]"), std::string::npos);
}

TEST(Inputs, PairAssemblyTypesAndTruncation) {
  ModelContext m = Ctx();
  Item q{true, "", {7, 8}}, d{true, "", {1, 2, 3, 4, 5, 6}};
  auto s = EncodePair(m, q, Item{true, "", {9}}, Truncate{}, "p");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ids, (std::vector<int32_t>{101, 7, 8, 102, 9, 102}));
  EXPECT_EQ(s->type_ids, (std::vector<int32_t>{0, 0, 0, 0, 1, 1}));
  auto over = EncodePair(m, q, d, Truncate{}, "documents[1]");
  EXPECT_EQ(over.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(over.status().message().find("documents[1]"), std::string::npos);
  EXPECT_NE(over.status().message().find("10"), std::string::npos);
  auto cut = EncodePair(m, q, d, Truncate{-1}, "p");
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->ids, (std::vector<int32_t>{101, 7, 8, 102, 1, 2, 3, 4, 5, 102}));
  auto cut6 = EncodePair(m, q, d, Truncate{6}, "p");
  ASSERT_TRUE(cut6.ok());
  EXPECT_EQ(cut6->ids.back(), 102);
  EXPECT_EQ(cut6->ids.size(), 6u);
  auto text = EncodePair(m, Item{false, "a", {}}, d, Truncate{}, "p");
  EXPECT_EQ(text.status().code(), StatusCode::kInvalidArgument);  // mixes text and ids
  auto one = EncodeOne(m, Item{true, "", std::vector<int32_t>(12, 1)}, Truncate{5}, "input");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->ids.size(), 5u);
  m.truncate_by_default = true;
  EXPECT_TRUE(EncodeOne(m, Item{true, "", std::vector<int32_t>(12, 1)}, Truncate{}, "x").ok());
}

TEST(Inputs, CountLimit) {
  ModelContext m = Ctx();
  EXPECT_TRUE(CheckCount(m, 4, "documents").ok());
  Status s = CheckCount(m, 5, "documents");
  EXPECT_NE(s.message().find("--max-inputs-per-request"), std::string::npos);
  EXPECT_FALSE(CheckCount(m, 0, "documents").ok());
}

TEST(Processors, RerankSortsAndCutsTopN) {
  ModelContext m = Ctx();
  ProcessorRegistry reg;
  const IoProcessor* p = reg.FindRoute("/v1/rerank");
  ASSERT_NE(p, nullptr);
  const std::string body = R"({"query": [7], "documents": [[1], {"text": [2]}, [3]], "top_n": 2})";
  auto st = p->Parse(IoRequest{"/v1/rerank", body, &m});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  std::vector<TokenSequence> seqs;
  ASSERT_TRUE(p->PreProcess(m, **st, &seqs).ok());
  ASSERT_EQ(seqs.size(), 3u);
  EXPECT_EQ((*st)->prompt_tokens, 15);
  std::vector<PooledOutput> outs(3);
  outs[0].values = {0.2f};
  outs[1].values = {0.9f};
  outs[2].values = {0.5f};
  auto r = p->PostProcess(m, **st, outs);
  ASSERT_TRUE(r.ok());
  // Documents given as token ids echo as text; without a tokenizer there is none to echo.
  EXPECT_NE(r->body.find(R"("results":[{"index":1,"relevance_score":0.9},{"index":2,)"),
            std::string::npos)
      << r->body;
  EXPECT_EQ(r->body.find(R"("index":0)"), std::string::npos);
}

TEST(Processors, RefuseWrongTaskAndModel) {
  ModelContext m = Ctx();
  ProcessorRegistry reg;
  auto e = reg.FindRoute("/v1/embeddings")->Parse(IoRequest{"", R"({"input": [1]})", &m});
  EXPECT_EQ(e.status().code(), StatusCode::kFailedPrecondition);
  auto n = reg.FindRoute("/score")->Parse(
      IoRequest{"", R"({"model": "x", "text_1": [1], "text_2": [2]})", &m});
  EXPECT_EQ(n.status().code(), StatusCode::kNotFound);
  auto k = reg.FindRoute("/score")->Parse(
      IoRequest{"", R"({"text_1": [[1], [2]], "text_2": [[1], [2], [3]]})", &m});
  EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument);
}

TEST(Processors, DimensionsOnlyForMatryoshkaModels) {
  ModelContext m = Ctx();
  m.task = "embed";
  m.output_dim = 16;
  ProcessorRegistry reg;
  auto parse = [&](const std::string& body) {
    return reg.FindRoute("/v1/embeddings")->Parse(IoRequest{"/v1/embeddings", body, &m});
  };
  EXPECT_TRUE(parse(R"({"input": [1]})").ok());
  auto no = parse(R"({"input": [1], "dimensions": 8})");
  EXPECT_EQ(no.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(no.status().message().find("dimensions"), std::string::npos);
  EXPECT_NE(no.status().message().find("Matryoshka"), std::string::npos);
  m.matryoshka = true;
  EXPECT_TRUE(parse(R"({"input": [1], "dimensions": 8})").ok());
  EXPECT_FALSE(parse(R"({"input": [1], "dimensions": 0})").ok());
  EXPECT_FALSE(parse(R"({"input": [1], "dimensions": 17})").ok());
  m.matryoshka_dimensions = {4, 12};
  EXPECT_TRUE(parse(R"({"input": [1], "dimensions": 12})").ok());
  auto other = parse(R"({"input": [1], "dimensions": 8})");
  EXPECT_NE(other.status().message().find("[4, 12]"), std::string::npos)
      << other.status().message();
  // Truncated, then normalised (the default).
  auto st = parse(R"({"input": [1], "dimensions": 4})");
  ASSERT_TRUE(st.ok());
  std::vector<PooledOutput> outs(1);
  outs[0].values.assign(16, 0.25f);
  auto r = reg.FindRoute("/v1/embeddings")->PostProcess(m, **st, outs);
  ASSERT_TRUE(r.ok());
  EXPECT_NE(r->body.find(R"("embedding":[0.5,0.5,0.5,0.5])"), std::string::npos) << r->body;
}

TEST(Processors, ResponseEnvelopes) {
  ModelContext m = Ctx();
  ProcessorRegistry reg;
  auto run = [&](const char* route, const std::string& body, std::vector<float> score) {
    const IoProcessor* p = reg.FindRoute(route);
    auto st = p->Parse(IoRequest{route, body, &m});
    EXPECT_TRUE(st.ok()) << st.status().ToString();
    std::vector<TokenSequence> seqs;
    EXPECT_TRUE(p->PreProcess(m, **st, &seqs).ok());
    std::vector<PooledOutput> outs(seqs.size());
    for (auto& o : outs) o.values = o.raw = score;
    return p->PostProcess(m, **st, outs)->body;
  };
  const std::string score = run("/score", R"({"text_1": [7], "text_2": [1]})", {0.5f});
  EXPECT_EQ(score.rfind(R"({"id":"score-)", 0), 0u) << score;
  EXPECT_NE(score.find(R"("object":"list","created":)"), std::string::npos);
  EXPECT_NE(
      score.find(
          R"("data":[{"index":0,"object":"score","score":0.5}],"usage":{"prompt_tokens":5,"total_tokens":5}})"),
      std::string::npos)
      << score;
  const std::string rr = run("/v1/rerank", R"({"query": [7], "documents": [[1]]})", {0.5f});
  EXPECT_NE(rr.find(R"("model":"m","results":[)"), std::string::npos) << rr;
  EXPECT_NE(rr.find(R"(],"usage":{"total_tokens":5}})"), std::string::npos) << rr;
  EXPECT_EQ(rr.find("created"), std::string::npos);
  m.task = "classify";
  const std::string cl = run("/classify", R"({"input": [[7, 8]]})", {0.25f, 0.75f});
  EXPECT_NE(cl.find(R"("data":[{"index":0,"label":"LABEL_1","probs":[0.25,0.75])"),
            std::string::npos)
      << cl;
  EXPECT_NE(cl.find(R"("usage":{"prompt_tokens":2,"total_tokens":2,"completion_tokens":0}})"),
            std::string::npos)
      << cl;
}

}  // namespace
}  // namespace sluice::io
