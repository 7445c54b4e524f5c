// PyLate's document skiplist on the PyLate ColBERT fixture (tests/fixtures/models/pylate_colbert):
// PyLate drops the vectors of the tokens of its skiplist_words (default string.punctuation,
// each converted with convert_tokens_to_ids, so a character missing from the vocabulary is
// [UNK]) from documents, never from queries, before MaxSim. Expected values are computed
// here by hand from the engine's token vectors of the same sequences, with the fixture
// vocabulary's punctuation ids written out: /score and /v1/rerank, /pooling (a "[D] "
// input), the offline path (io::DropDocumentSkiplist), and the sluice.json override.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "golden_inputs.h"
#include "io/builtins.h"
#include "io/model_context.h"
#include "io/offline.h"
#include "io/registry.h"
#include "pooling/head.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

// The fixture vocabulary's ids of string.punctuation: ! % ' , - . : ; ? are tokens (5 6 7 8
// 9 10 14 15 16); the other characters are not, so convert_tokens_to_ids gives [UNK] (1).
const std::set<int32_t> kPunctuation = {1, 5, 6, 7, 8, 9, 10, 14, 15, 16};

const char* kQuery = "the food was great";
// Documents full of punctuation (and one without any).
const std::vector<std::string> kDocs = {"the food ... was great !!! , ; : ? - %",
                                        "! ? . , ; : - % ' ! ? .", "The wait was long",
                                        "coffee (staff) ~ dirty # room"};

struct Served {
  std::unique_ptr<Engine> engine;
  ModelContext m;
};

Served Load(const fs::path& dir) {
  EngineOptions o;
  o.model_dir = dir.string();
  o.backend.num_threads = 2;
  o.backend.device = testing::TestDevice();
  auto engine = Engine::Load(o);
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  if (!engine.ok()) return {};
  io::ContextOptions co;
  co.served_name = "colbert";
  auto ctx = io::BuildModelContext(**engine, (*engine)->bundle().tokenizer.get(), co);
  EXPECT_TRUE(ctx.ok()) << ctx.status().ToString();
  if (!ctx.ok()) return {};
  return Served{std::move(engine).value(), std::move(ctx).value()};
}

// MaxSim of q over the rows of d whose token is not in `skip`.
double HandMaxSim(const PooledOutput& q, const PooledOutput& d, const std::vector<int32_t>& ids,
                  const std::set<int32_t>& skip) {
  const size_t dim = q.values.size() / q.rows;
  EXPECT_EQ(static_cast<size_t>(d.rows), ids.size());
  double total = 0;
  for (int i = 0; i < q.rows; ++i) {
    double best = -INFINITY;
    for (int j = 0; j < d.rows; ++j) {
      if (skip.count(ids[j])) continue;
      double dot = 0;
      for (size_t k = 0; k < dim; ++k) dot += double(q.values[i * dim + k]) * d.values[j * dim + k];
      best = std::max(best, dot);
    }
    total += best;
  }
  return total;
}

std::string JsonList(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
  return s + "]";
}

// The scores a route gives kQuery against kDocs (by document index), and the sequences.
std::vector<double> RouteScores(const ModelContext& m, Engine& engine, const char* route,
                                std::vector<TokenSequence>* seqs_out) {
  io::ProcessorRegistry reg;
  const bool rerank = std::string(route) == "/v1/rerank";
  const std::string body =
      rerank
          ? std::string(R"({"query": ")") + kQuery + R"(", "documents": )" + JsonList(kDocs) + "}"
          : std::string(R"({"text_1": ")") + kQuery + R"(", "text_2": )" + JsonList(kDocs) + "}";
  const IoProcessor* p = reg.FindRoute(route);
  EXPECT_NE(p, nullptr);
  auto st = p->Parse(IoRequest{route, body, &m});
  EXPECT_TRUE(st.ok()) << st.status().ToString();
  std::vector<TokenSequence> seqs;
  EXPECT_TRUE(p->PreProcess(m, **st, &seqs).ok());
  auto outs = engine.Run(seqs);
  EXPECT_TRUE(outs.ok()) << outs.status().ToString();
  auto resp = p->PostProcess(m, **st, *outs);
  EXPECT_TRUE(resp.ok()) << resp.status().ToString();
  simdjson::dom::parser rp;
  simdjson::dom::element r = rp.parse(resp->body);
  std::vector<double> scores(kDocs.size(), NAN);
  for (auto e : r[rerank ? "results" : "data"].get_array()) {
    const size_t d = static_cast<size_t>(e["index"].get_int64().value());
    scores.at(d) = e[rerank ? "relevance_score" : "score"].get_double().value();
  }
  if (seqs_out) *seqs_out = seqs;
  return scores;
}

const fs::path kModel = fs::path(SLUICE_FIXTURES_DIR) / "models" / "pylate_colbert";

TEST(PylateSkiplist, DocumentsLosePunctuationBeforeMaxSim) {
  Served s = Load(kModel);
  ASSERT_TRUE(s.engine);
  const ModelContext& m = s.m;
  EXPECT_EQ(std::set<int32_t>(m.skiplist_ids.begin(), m.skiplist_ids.end()), kPunctuation);
  EXPECT_EQ(m.document_prefix_id, *s.engine->bundle().tokenizer->TokenToId("[D] "));
  std::vector<TokenSequence> seqs;
  const std::vector<double> score = RouteScores(m, *s.engine, "/score", &seqs);
  ASSERT_EQ(seqs.size(), 1 + kDocs.size());
  auto outs = s.engine->Run(seqs);  // the token vectors, every row
  ASSERT_TRUE(outs.ok()) << outs.status().ToString();
  const std::vector<double> rerank = RouteScores(m, *s.engine, "/v1/rerank", nullptr);
  double changed = 0;
  for (size_t d = 0; d < kDocs.size(); ++d) {
    const auto& ids = seqs[1 + d].ids;
    const double want = HandMaxSim((*outs)[0], (*outs)[1 + d], ids, kPunctuation);
    const double all = HandMaxSim((*outs)[0], (*outs)[1 + d], ids, {});
    EXPECT_NEAR(score[d], want, 1e-4) << kDocs[d];
    EXPECT_NEAR(rerank[d], want, 1e-4) << kDocs[d];
    const bool has_punct =
        std::any_of(ids.begin(), ids.end(), [](int32_t t) { return kPunctuation.count(t) > 0; });
    if (!has_punct) {
      EXPECT_NEAR(want, all, 1e-6) << kDocs[d];
    }
    changed = std::max(changed, std::fabs(all - want));
  }
  // Without the skiplist the punctuation would have won some query tokens' maxima.
  EXPECT_GT(changed, 1e-3);
}

TEST(PylateSkiplist, PoolingDropsPunctuationOfDocumentsOnly) {
  Served s = Load(kModel);
  ASSERT_TRUE(s.engine);
  const ModelContext& m = s.m;
  io::ProcessorRegistry reg;
  const IoProcessor* p = reg.FindRoute("/pooling");
  ASSERT_NE(p, nullptr);
  // A document (the document prefix after [CLS]), a query, and a text without either.
  const std::vector<std::string> inputs = {"[D] the food, was great!", "[Q] the food, was great!",
                                           "the food, was great!"};
  auto st = p->Parse(IoRequest{"/pooling", R"({"input": )" + JsonList(inputs) + "}", &m});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  std::vector<TokenSequence> seqs;
  ASSERT_TRUE(p->PreProcess(m, **st, &seqs).ok());
  ASSERT_EQ(seqs.size(), 3u);
  auto full = s.engine->Run(seqs);
  ASSERT_TRUE(full.ok());
  auto outs = s.engine->Run(seqs);
  ASSERT_TRUE(outs.ok());
  auto resp = p->PostProcess(m, **st, *outs);
  ASSERT_TRUE(resp.ok()) << resp.status().ToString();
  simdjson::dom::parser rp;
  simdjson::dom::element r = rp.parse(resp->body);
  size_t i = 0;
  for (auto e : r["data"].get_array()) {
    const auto& ids = seqs[i].ids;
    const PooledOutput& f = (*full)[i];
    const size_t dim = f.values.size() / f.rows;
    std::vector<size_t> kept;
    for (size_t t = 0; t < ids.size(); ++t) {
      if (i != 0 || !kPunctuation.count(ids[t])) kept.push_back(t);
    }
    if (i == 0) {
      EXPECT_LT(kept.size(), ids.size());  // "," and "!" are gone
      std::vector<size_t> got;
      for (auto x : e["token_indices"].get_array()) got.push_back(x.get_int64().value());
      EXPECT_EQ(got, kept);
    } else {
      simdjson::dom::element ti;
      EXPECT_TRUE(e["token_indices"].get(ti)) << "input " << i << " keeps every token";
    }
    size_t row = 0;
    for (auto v : e["data"].get_array()) {
      ASSERT_LT(row, kept.size());
      size_t k = 0;
      for (auto x : v.get_array()) {
        EXPECT_NEAR(x.get_double().value(), f.values[kept[row] * dim + k], 1e-6);
        ++k;
      }
      EXPECT_EQ(k, dim);
      ++row;
    }
    EXPECT_EQ(row, kept.size()) << "input " << i;
    ++i;
  }
  EXPECT_EQ(i, 3u);
  // Offline (`sluice score|embed` inputs, the C API): the same rule on the same sequences.
  auto off = s.engine->Run(seqs);
  ASSERT_TRUE(off.ok());
  io::DropDocumentSkiplist(*s.engine, seqs, &*off);
  EXPECT_EQ((*off)[0].rows, (*outs)[0].rows);
  EXPECT_EQ((*off)[0].values, (*outs)[0].values);
  EXPECT_EQ((*off)[0].token_indices, (*outs)[0].token_indices);
  EXPECT_EQ((*off)[1].rows, static_cast<int>(seqs[1].ids.size()));
  EXPECT_EQ((*off)[2].rows, static_cast<int>(seqs[2].ids.size()));
}

// PyLate cuts documents to its document_length (config_sentence_transformers.json: 40 here),
// the prefix and [SEP] in: [CLS] [D] the first 37 tokens [SEP]. Queries are not cut.
TEST(PylateSkiplist, DocumentsAreCutToTheDocumentLength) {
  Served s = Load(kModel);
  ASSERT_TRUE(s.engine);
  EXPECT_EQ(s.m.document_length, 40);
  EXPECT_EQ(s.m.document_prefix, "[D] ");  // from PyLate's config (and sluice.json)
  std::string text;
  for (int i = 0; i < 12; ++i) text += "the food was great ";
  io::ProcessorRegistry reg;
  const IoProcessor* p = reg.FindRoute("/score");
  auto st = p->Parse(IoRequest{
      "/score", R"({"text_1": "wait was long", "text_2": [")" + text + R"(", "Boston"]})", &s.m});
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  std::vector<TokenSequence> seqs;
  ASSERT_TRUE(p->PreProcess(s.m, **st, &seqs).ok());
  ASSERT_EQ(seqs.size(), 3u);
  const Tokenizer& tok = *s.engine->bundle().tokenizer;
  std::vector<int32_t> full = tok.Encode("[D] " + text, true)->ids;
  ASSERT_GT(full.size(), 40u);
  std::vector<int32_t> want(full.begin(), full.begin() + 39);
  want.push_back(full.back());  // [SEP]
  EXPECT_EQ(seqs[1].ids, want);
  EXPECT_EQ(seqs[2].ids, tok.Encode("[D] Boston", true)->ids);
}

TEST(PylateSkiplist, SluiceJsonOverridesTheSkiplist) {
  const fs::path dir =
      fs::temp_directory_path() / ("sluice_skiplist_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(kModel, dir, fs::copy_options::recursive);
  auto write = [&](const std::string& json) { std::ofstream(dir / "sluice.json") << json; };
  // [] = no skiplist: every document token is scored.
  write(R"({"late_interaction": true, "query_prefix": "[Q] ", "document_prefix": "[D] ",
            "skiplist_words": []})");
  {
    Served s = Load(dir);
    ASSERT_TRUE(s.engine);
    EXPECT_TRUE(s.m.skiplist_ids.empty());
    std::vector<TokenSequence> seqs;
    const std::vector<double> score = RouteScores(s.m, *s.engine, "/score", &seqs);
    auto outs = s.engine->Run(seqs);
    ASSERT_TRUE(outs.ok());
    for (size_t d = 0; d < kDocs.size(); ++d) {
      EXPECT_NEAR(score[d], HandMaxSim((*outs)[0], (*outs)[1 + d], seqs[1 + d].ids, {}), 1e-4);
    }
  }
  // A list of its own: only those tokens ("!" is 5; "#" is not in the vocabulary: [UNK], 1).
  write(R"({"late_interaction": true, "query_prefix": "[Q] ", "document_prefix": "[D] ",
            "skiplist_words": ["!", "#"]})");
  {
    Served s = Load(dir);
    ASSERT_TRUE(s.engine);
    EXPECT_EQ(s.m.skiplist_ids, (std::vector<int32_t>{1, 5}));
    std::vector<TokenSequence> seqs;
    const std::vector<double> score = RouteScores(s.m, *s.engine, "/score", &seqs);
    auto outs = s.engine->Run(seqs);
    ASSERT_TRUE(outs.ok());
    for (size_t d = 0; d < kDocs.size(); ++d) {
      EXPECT_NEAR(score[d], HandMaxSim((*outs)[0], (*outs)[1 + d], seqs[1 + d].ids, {1, 5}), 1e-4);
    }
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sluice
