// PyLate ColBERT parity on the served path: tests/fixtures/golden/pylate_colbert.json and
// tests/fixtures/models/pylate_colbert (tests/golden/generate_tokenlevel.py, pylate_case:
// PyLate's query path emulated with transformers -- "[Q] " after [CLS], [MASK] padding to
// query_length, attention_mask 0 on the [MASK] tokens, Dense, L2 normalisation, MaxSim).
// The model directory asks for the expansion the PyLate way (config_sentence_transformers.json
// query_length, attend_to_expansion_tokens false); /score and /v1/rerank over the texts must
// build PyLate's sequences (the [MASK] tokens left out of the keys) and give its scores. The
// documents' skiplist tokens (PyLate's string.punctuation) must be left out of their MaxSim
// (the fixture's "outputs" keep every row, as the engine gives them; "served" scores do not:
// tests/golden/skiplist_test.cc checks the same by hand on documents full of punctuation). The
// golden test runs the same fixture's inputs through the engine (golden_test.cc); the offline
// path (io::MarkQueryExpansion) marks PyLate's padded ids the same way. Skipped,
// saying how to make the fixture, only when it is absent.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "golden_inputs.h"
#include "io/builtins.h"
#include "io/model_context.h"
#include "io/offline.h"
#include "io/registry.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

std::string JsonList(const std::vector<std::string>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
  return s + "]";
}

double MaxAbs(const std::vector<float>& a, simdjson::dom::array b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  size_t i = 0;
  for (auto x : b) m = std::max(m, std::fabs(a[i++] - x.get_double().value()));
  return m;
}

TEST(PylateColbert, ServedQueriesMatchPylate) {
  const fs::path fixtures = SLUICE_FIXTURES_DIR;
  const fs::path json = fixtures / "golden" / "pylate_colbert.json";
  if (!fs::exists(json)) {
    GTEST_SKIP() << json.string()
                 << " is absent: make it on the GPU machine with `python3 "
                    "tests/golden/generate.py --only tokenlevel --out tests/fixtures`";
  }
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(json.string());
  const double tol = doc["tolerance"].get_double().value();
  simdjson::dom::element served = doc["served"];
  std::vector<std::string> queries, documents;
  for (auto q : served["queries"].get_array()) queries.emplace_back(q.get_string().value());
  for (auto d : served["documents"].get_array()) documents.emplace_back(d.get_string().value());
  std::vector<std::vector<double>> scores;
  for (auto row : served["scores"].get_array()) {
    scores.emplace_back();
    for (auto x : row.get_array()) scores.back().push_back(x.get_double().value());
  }
  const int query_length = static_cast<int>(served["query_length"].get_int64().value());
  // PyLate's sequences: the queries, then the documents; their token vectors.
  const std::vector<TokenSequence> pylate = testing::GoldenInputs(doc);
  std::vector<simdjson::dom::array> vectors;
  for (auto v : doc["outputs"].get_array()) vectors.push_back(v.get_array());
  const size_t nq = queries.size(), nd = documents.size();
  ASSERT_EQ(pylate.size(), nq + nd);
  ASSERT_EQ(scores.size(), nq);

  EngineOptions o;
  o.model_dir = (fixtures / "models" / "pylate_colbert").string();
  o.backend.num_threads = 2;
  o.backend.device = testing::TestDevice();
  auto engine = Engine::Load(o);
  ASSERT_TRUE(engine.ok()) << engine.status().ToString();
  io::ContextOptions co;
  co.served_name = "colbert";
  auto ctx = io::BuildModelContext(**engine, (*engine)->bundle().tokenizer.get(), co);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const ModelContext& m = *ctx;
  EXPECT_TRUE(m.late_interaction);
  EXPECT_EQ(m.query_length, query_length);
  EXPECT_FALSE(m.query_expansion_attended);  // PyLate's default, from its own config

  io::ProcessorRegistry reg;
  double worst_vec = 0, worst_score = 0;
  for (size_t q = 0; q < nq; ++q) {
    for (const char* route : {"/score", "/v1/rerank"}) {
      const bool rerank = std::string(route) == "/v1/rerank";
      const std::string body =
          rerank ? R"({"query": ")" + queries[q] + R"(", "documents": )" + JsonList(documents) + "}"
                 : R"({"text_1": ")" + queries[q] + R"(", "text_2": )" + JsonList(documents) + "}";
      const IoProcessor* p = reg.FindRoute(route);
      ASSERT_NE(p, nullptr);
      auto st = p->Parse(IoRequest{route, body, &m});
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      std::vector<TokenSequence> seqs;
      ASSERT_TRUE(p->PreProcess(m, **st, &seqs).ok());
      ASSERT_EQ(seqs.size(), 1 + nd);
      // The query as PyLate builds it, its [MASK] tokens no token's keys.
      EXPECT_EQ(seqs[0].ids, pylate[q].ids) << queries[q];
      EXPECT_EQ(seqs[0].attended, pylate[q].attended) << queries[q];
      EXPECT_GT(pylate[q].attended, 0) << queries[q] << ": the fixture's query has no expansion";
      for (size_t d = 0; d < nd; ++d) {
        EXPECT_EQ(seqs[1 + d].ids, pylate[nq + d].ids) << documents[d];
        EXPECT_EQ(seqs[1 + d].attended, 0) << documents[d];
      }
      auto outs = (*engine)->Run(seqs);
      ASSERT_TRUE(outs.ok()) << outs.status().ToString();
      const double dv = MaxAbs((*outs)[0].values, vectors[q]);
      EXPECT_LE(dv, tol) << queries[q] << ": query token vectors";
      worst_vec = std::max(worst_vec, dv);
      auto resp = p->PostProcess(m, **st, *outs);
      ASSERT_TRUE(resp.ok()) << resp.status().ToString();
      simdjson::dom::parser rp;
      simdjson::dom::element r = rp.parse(resp->body);
      size_t seen = 0;
      for (auto e : r[rerank ? "results" : "data"].get_array()) {
        const size_t d = static_cast<size_t>(e["index"].get_int64().value());
        const double s = e[rerank ? "relevance_score" : "score"].get_double().value();
        ASSERT_LT(d, nd);
        const double diff = std::fabs(s - scores[q][d]);
        EXPECT_LE(diff, tol * 10) << route << " " << queries[q] << " / " << documents[d];
        worst_score = std::max(worst_score, diff);
        ++seen;
      }
      EXPECT_EQ(seen, nd) << route;
    }
  }
  // Offline (`sluice embed|score`, the C API): PyLate's padded query ids, as a client would
  // give them, get its key limits and its vectors.
  std::vector<TokenSequence> offline = pylate;
  for (TokenSequence& s : offline) s.attended = 0;
  ASSERT_TRUE(io::MarkQueryExpansion(**engine, &offline).ok());
  for (size_t i = 0; i < offline.size(); ++i) {
    EXPECT_EQ(offline[i].attended, pylate[i].attended) << "offline input " << i;
  }
  auto oo = (*engine)->Run(offline);
  ASSERT_TRUE(oo.ok()) << oo.status().ToString();
  for (size_t i = 0; i < offline.size(); ++i) {
    const double dv = MaxAbs((*oo)[i].values, vectors[i]);
    EXPECT_LE(dv, tol) << "offline input " << i;
    worst_vec = std::max(worst_vec, dv);
  }
  std::printf("[ parity ] %-28s %-12s max |diff| %.3g (tolerance %.0e)\n", "pylate_colbert",
              "vectors", worst_vec, tol);
  std::printf("[ parity ] %-28s %-12s max |diff| %.3g (tolerance %.0e)\n", "pylate_colbert",
              "scores", worst_score, tol * 10);
}

}  // namespace
}  // namespace sluice
