// Parity with the Hugging Face token-classification pipeline: every case under
// tests/fixtures/token_classification/ (written by tests/golden/generate_tokenlevel.py: a tiny
// token classifier with its tokenizer.json, and per text the pipeline's entities for several
// aggregation strategies and ignore_labels) goes through sluice's tokenizer, engine and
// token-classification post-processing (io/token_classify.h). Labels, words and character
// offsets must be identical, scores within the case's tolerance (1e-4). Each text alone and
// inside one batch with the others (duplicates included) gives the same entities.
// SLUICE_TEST_DEVICE=cuda runs the engine on CUDA.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "engine/engine.h"
#include "golden_inputs.h"
#include "io/token_classify.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

const std::string kDir = std::string(SLUICE_FIXTURES_DIR) + "/token_classification";

struct Variant {
  std::string name;
  io::Aggregation aggregation = io::Aggregation::kNone;
  std::optional<std::vector<std::string>> ignore_labels;  // nullopt: the default ["O"]
};

struct Text {
  std::string text;
  std::vector<int32_t> input_ids;
  std::vector<std::vector<io::TokenEntity>> want;  // per variant
};

struct PipelineCase {
  std::vector<std::string> labels;
  double tolerance = 1e-4;
  std::vector<Variant> variants;
  std::vector<Text> texts;
};

PipelineCase Load(const std::string& name) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kDir + "/" + name + "/expected.json");
  PipelineCase c;
  for (auto l : doc["labels"].get_array()) c.labels.emplace_back(l.get_string().value());
  c.tolerance = doc["tolerance"].get_double().value();
  for (auto v : doc["variants"].get_array()) {
    Variant var;
    var.name = std::string(v["name"].get_string().value());
    EXPECT_TRUE(
        io::ParseAggregation(v["aggregation_strategy"].get_string().value(), &var.aggregation));
    simdjson::dom::array ign;
    if (!v["ignore_labels"].get(ign)) {
      var.ignore_labels.emplace();
      for (auto l : ign) var.ignore_labels->emplace_back(l.get_string().value());
    }
    c.variants.push_back(std::move(var));
  }
  for (auto t : doc["cases"].get_array()) {
    Text x;
    x.text = std::string(t["text"].get_string().value());
    for (auto id : t["input_ids"].get_array())
      x.input_ids.push_back(static_cast<int32_t>(id.get_int64()));
    for (const Variant& v : c.variants) {
      std::vector<io::TokenEntity> ents;
      for (auto e : t["outputs"][v.name].get_array()) {
        io::TokenEntity te;
        std::string_view label;
        if (e["entity"].get(label)) label = e["entity_group"].get_string().value();
        te.label = std::string(label);
        te.score = static_cast<float>(e["score"].get_double().value());
        int64_t index;
        if (!e["index"].get(index)) te.index = static_cast<int>(index);
        te.word = std::string(e["word"].get_string().value());
        te.start = e["start"].get_int64().value();
        te.end = e["end"].get_int64().value();
        ents.push_back(std::move(te));
      }
      x.want.push_back(std::move(ents));
    }
    c.texts.push_back(std::move(x));
  }
  return c;
}

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  if (!fs::exists(kDir)) return names;
  for (const auto& e : fs::directory_iterator(kDir)) {
    if (e.is_directory() && fs::exists(e.path() / "expected.json")) {
      names.push_back(e.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::unique_ptr<Engine> LoadEngine(const std::string& name) {
  EngineOptions o;
  o.model_dir = kDir + "/" + name + "/model";
  o.backend.num_threads = 2;
  o.backend.device = testing::TestDevice();
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << name << ": " << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

io::TokenClassifyParams Params(const Engine& engine, const Variant& v) {
  io::TokenClassifyParams p;
  p.tokenizer = engine.bundle().tokenizer.get();
  p.labels = &engine.head().labels;
  p.aggregation = v.aggregation;
  if (v.ignore_labels) p.ignore_labels = *v.ignore_labels;
  return p;
}

class PipelineTest : public ::testing::TestWithParam<std::string> {};

TEST_P(PipelineTest, MatchesTransformers) {
  const PipelineCase c = Load(GetParam());
  auto engine = LoadEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->info().task, Task::kTokenClassify);
  EXPECT_EQ(engine->head().labels, c.labels);
  const Tokenizer* tok = engine.get()->bundle().tokenizer.get();
  ASSERT_NE(tok, nullptr);
  std::vector<Encoding> encs;
  std::vector<TokenSequence> seqs;
  const bool types = engine->model().config().type_vocab_size > 1;
  for (const Text& t : c.texts) {
    auto enc = tok->Encode(t.text);
    ASSERT_TRUE(enc.ok()) << enc.status().ToString();
    ASSERT_EQ(enc->ids, t.input_ids) << t.text;  // the pipeline's tokens
    seqs.push_back({enc->ids, types ? enc->type_ids : std::vector<int32_t>{}});
    encs.push_back(std::move(enc).value());
  }
  auto outs = engine->Run(seqs);
  ASSERT_TRUE(outs.ok()) << outs.status().ToString();
  double worst = 0;
  size_t entities = 0;
  for (size_t v = 0; v < c.variants.size(); ++v) {
    const io::TokenClassifyParams p = Params(*engine, c.variants[v]);
    for (size_t i = 0; i < c.texts.size(); ++i) {
      auto got = io::ClassifyTokens(p, c.texts[i].text, encs[i], 0, (*outs)[i].values.data());
      ASSERT_TRUE(got.ok()) << got.status().ToString();
      const auto& want = c.texts[i].want[v];
      ASSERT_EQ(got->size(), want.size())
          << GetParam() << " " << c.variants[v].name << ": \"" << c.texts[i].text << "\"";
      for (size_t k = 0; k < want.size(); ++k) {
        const io::TokenEntity& a = (*got)[k];
        const io::TokenEntity& b = want[k];
        const std::string where = GetParam() + " " + c.variants[v].name + " entity " +
                                  std::to_string(k) + " of \"" + c.texts[i].text + "\"";
        EXPECT_EQ(a.label, b.label) << where;
        EXPECT_EQ(a.word, b.word) << where;
        EXPECT_EQ(a.start, b.start) << where;
        EXPECT_EQ(a.end, b.end) << where;
        EXPECT_EQ(a.index, b.index) << where;
        EXPECT_NEAR(a.score, b.score, c.tolerance) << where;
        worst = std::max(worst, std::fabs(double(a.score) - b.score));
      }
      entities += want.size();
    }
  }
  std::printf("[ parity ] %-22s %3zu texts x %zu variants, %4zu entities, max |score diff| %.3g\n",
              GetParam().c_str(), c.texts.size(), c.variants.size(), entities, worst);
}

TEST_P(PipelineTest, SameEntitiesAloneAndBatched) {
  const PipelineCase c = Load(GetParam());
  auto engine = LoadEngine(GetParam());
  ASSERT_NE(engine, nullptr);
  const Tokenizer* tok = engine->bundle().tokenizer.get();
  const bool types = engine->model().config().type_vocab_size > 1;
  std::vector<Encoding> encs;
  std::vector<TokenSequence> seqs;
  for (const Text& t : c.texts) {
    auto enc = tok->Encode(t.text);
    ASSERT_TRUE(enc.ok());
    seqs.push_back({enc->ids, types ? enc->type_ids : std::vector<int32_t>{}});
    encs.push_back(std::move(enc).value());
  }
  // Every text, then duplicates of the first three, in one batch.
  std::vector<const TokenSequence*> batch;
  for (const auto& s : seqs) batch.push_back(&s);
  for (size_t i = 0; i < 3 && i < seqs.size(); ++i) batch.push_back(&seqs[i]);
  std::vector<PooledOutput> mixed(batch.size());
  ASSERT_TRUE(engine->RunBatch(batch, mixed.data()).ok());
  const io::TokenClassifyParams p = Params(*engine, c.variants[1]);  // simple
  for (size_t i = 0; i < batch.size(); ++i) {
    const size_t t = i < seqs.size() ? i : i - seqs.size();
    PooledOutput alone;
    ASSERT_TRUE(engine->RunBatch({&seqs[t]}, &alone).ok());
    ASSERT_EQ(alone.values.size(), mixed[i].values.size());
    for (size_t k = 0; k < alone.values.size(); ++k) {
      ASSERT_NEAR(alone.values[k], mixed[i].values[k], 1e-5) << c.texts[t].text;
    }
    if (i >= seqs.size()) {
      EXPECT_EQ(mixed[i].values, mixed[t].values) << "duplicates differ";
    }
    auto a = io::ClassifyTokens(p, c.texts[t].text, encs[t], 0, alone.values.data());
    auto b = io::ClassifyTokens(p, c.texts[t].text, encs[t], 0, mixed[i].values.data());
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    for (size_t k = 0; k < a->size(); ++k) {
      EXPECT_EQ((*a)[k].label, (*b)[k].label);
      EXPECT_EQ((*a)[k].start, (*b)[k].start);
      EXPECT_EQ((*a)[k].end, (*b)[k].end);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, PipelineTest, ::testing::ValuesIn(CaseNames()),
                         [](const auto& p) { return p.param; });

TEST(PipelineFixtures, Present) { EXPECT_GE(CaseNames().size(), 3u); }

}  // namespace
}  // namespace sluice
