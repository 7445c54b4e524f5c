// Structured outputs in the generation engine: the sampler never picks a masked token (greedy
// and sampled, raw logprobs unchanged), and constrained generations on the demo chat model
// always match their constraint (JSON Schema, regex, choice; n > 1 forks), end as soon as
// the constraint allows nothing more, and refuse min_tokens / ignore_eos.
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "gen_util.h"
#include "structured/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace sluice {
namespace {

TEST(StructuredSampling, MaskedTokensAreNeverPicked) {
  BackendOptions bo;
  bo.device = testing::TestDevice();
  bo.num_threads = 2;
  auto backend = CreateBackend(bo);
  ASSERT_TRUE(backend.ok());
  Backend& be = **backend;
  const int V = 1000, W = (V + 31) / 32;
  std::vector<float> logits(2 * V);
  for (int i = 0; i < 2 * V; ++i) logits[i] = std::sin(0.37f * i);
  logits[17] = 9.f;  // the unmasked argmax
  Buffer lb = be.Allocate(DType::kF32, 2, V);
  HostBuffer rb = be.AllocateHost(2 * sizeof(SamplingRow));
  HostBuffer ob = be.AllocateHost(2 * sizeof(SampledToken));
  HostBuffer mb = be.AllocateHost(sizeof(uint32_t) * W);
  uint32_t* m = mb.as<uint32_t>();
  std::fill(m, m + W, 0u);
  for (int t : {3, 7, 900}) m[t / 32] |= 1u << (t % 32);
  std::map<int, int> seen;
  double lp3 = 0;
  for (int draw = 0; draw < 300; ++draw) {
    be.CopyFromHost(logits.data(), lb.t());
    SamplingRow greedy;
    greedy.mask_row = 0;
    SamplingRow sampled;
    sampled.temperature = 1.f;
    sampled.top_k = 2;
    sampled.seed = 11;
    sampled.counter = static_cast<uint64_t>(draw);
    sampled.mask_row = 0;
    rb.as<SamplingRow>()[0] = greedy;
    rb.as<SamplingRow>()[1] = sampled;
    SampleParams sp;
    sp.logits = lb.t();
    sp.num_rows = 2;
    sp.rows = rb.as<SamplingRow>();
    sp.out = ob.as<SampledToken>();
    sp.masks = m;
    sp.num_masks = 1;
    sp.mask_words = W;
    be.Sample(sp);
    be.Synchronize();
    const int best = logits[3] > logits[7] ? (logits[3] > logits[900] ? 3 : 900)
                                           : (logits[7] > logits[900] ? 7 : 900);
    ASSERT_EQ(sp.out[0].token, best);
    ++seen[sp.out[1].token];
    if (sp.out[1].token == 3) lp3 = sp.out[1].logprob;
  }
  // top_k 2 among the allowed tokens: only the two largest of {3, 7, 900} of row 1.
  std::vector<std::pair<float, int>> allowed = {
      {logits[V + 3], 3}, {logits[V + 7], 7}, {logits[V + 900], 900}};
  std::sort(allowed.rbegin(), allowed.rend());
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_GT(seen[allowed[0].second], 0);
  EXPECT_GT(seen[allowed[1].second], 0);
  EXPECT_EQ(seen.count(allowed[2].second), 0u);
  if (seen.count(3)) {  // raw logprob: log_softmax of the unmasked logits
    double z = 0, mx = -1e9;
    for (int i = 0; i < V; ++i) mx = std::max<double>(mx, logits[V + i]);
    for (int i = 0; i < V; ++i) z += std::exp(logits[V + i] - mx);
    EXPECT_NEAR(lp3, logits[V + 3] - mx - std::log(z), 1e-4);
  }
}

const std::string DemoChat() {
  return std::string(SLUICE_FIXTURES_DIR) + "/../../models/demo-chat";
}

std::shared_ptr<GenerateRequest> Constrained(const Tokenizer& tok, structured::ConstraintSpec spec,
                                             uint64_t seed, int n = 1) {
  auto enc = tok.Encode(
      "<|im_start|>user\nWhere do salmon swim?<|im_end|>\n<|im_start|>assistant\n", false);
  EXPECT_TRUE(enc.ok());
  SamplingParams p;
  p.temperature = 1.f;
  p.seed = seed;
  p.n = n;
  p.max_tokens = 200;
  p.constraint = std::move(spec);
  return testing::Request(enc->ids, p);
}

TEST(StructuredGeneration, OutputsAlwaysMatchTheConstraint) {
  auto g = testing::LoadGenerator(DemoChat());
  ASSERT_NE(g, nullptr);
  const Tokenizer& tok = *g->bundle().tokenizer;
  structured::ConstraintSpec schema;
  schema.kind = structured::ConstraintSpec::Kind::kJsonSchema;
  schema.field = "guided_json";
  schema.text = R"({"type":"object","properties":{"animal":{"type":"string","maxLength":10},
      "place":{"enum":["river","lake","meadow"]},"count":{"type":"integer","minimum":1,"maximum":20},
      "tags":{"type":"array","items":{"type":"string","pattern":"^[a-z]{1,5}$"},"maxItems":3}},
      "required":["animal","place"],"additionalProperties":false})";
  structured::ConstraintSpec regex;
  regex.kind = structured::ConstraintSpec::Kind::kRegex;
  regex.field = "guided_regex";
  regex.text = "(salmon|bees) (swim|fly) [0-9]{1,3}";
  structured::ConstraintSpec choice;
  choice.kind = structured::ConstraintSpec::Kind::kChoice;
  choice.field = "guided_choice";
  choice.choices = {"river", "lake", "none of them"};
  std::vector<std::shared_ptr<GenerateRequest>> reqs;
  for (uint64_t seed = 0; seed < 8; ++seed) {
    reqs.push_back(Constrained(tok, schema, seed, 2));
    reqs.push_back(Constrained(tok, regex, seed));
    reqs.push_back(Constrained(tok, choice, seed));
  }
  testing::RunAll(*g, reqs);
  int stopped = 0;
  std::set<std::string> distinct;
  for (const auto& r : reqs) {
    auto gr = g->CompileConstraint(*r->params.constraint);
    ASSERT_TRUE(gr.ok());
    for (const CompletionOutput& o : r->outputs) {
      if (o.finish_reason == "length") continue;  // cut by max_tokens
      ASSERT_EQ(o.finish_reason, "stop");
      ++stopped;
      distinct.insert(o.text);
      EXPECT_TRUE((*gr)->Matches(o.text)) << r->params.constraint->field << ": " << o.text;
    }
  }
  EXPECT_GE(stopped, 24);
  EXPECT_GE(distinct.size(), 6u);  // sampled, not one fixed answer
}

// A tree node as the schema below says: {"v": 0..9, "kids": [node, ...] (at most 2)}, no other
// key. Independent of the automaton: parsed with simdjson.
bool ValidTree(simdjson::dom::element e, int depth, int* max_depth) {
  *max_depth = std::max(*max_depth, depth);
  simdjson::dom::object o;
  if (e.get(o) != simdjson::SUCCESS) return false;
  bool has_v = false;
  for (auto [k, v] : o) {
    if (k == "v") {
      int64_t x;
      if (v.get(x) != simdjson::SUCCESS || x < 0 || x > 9) return false;
      has_v = true;
    } else if (k == "kids") {
      simdjson::dom::array a;
      if (v.get(a) != simdjson::SUCCESS || a.size() > 2) return false;
      for (simdjson::dom::element c : a) {
        if (!ValidTree(c, depth + 1, max_depth)) return false;
      }
    } else {
      return false;
    }
  }
  return has_v;
}

TEST(StructuredGeneration, RecursiveSchemaOutputsParseAndValidate) {
  auto g = testing::LoadGenerator(DemoChat());
  ASSERT_NE(g, nullptr);
  const Tokenizer& tok = *g->bundle().tokenizer;
  structured::ConstraintSpec tree;
  tree.kind = structured::ConstraintSpec::Kind::kJsonSchema;
  tree.field = "guided_json";
  tree.text = R"({"type":"object","properties":{"v":{"type":"integer","minimum":0,"maximum":9},
      "kids":{"type":"array","items":{"$ref":"#"},"maxItems":2}},"required":["v"],
      "additionalProperties":false})";
  std::vector<std::shared_ptr<GenerateRequest>> reqs;
  for (uint64_t seed = 0; seed < 12; ++seed) {
    reqs.push_back(Constrained(tok, tree, seed, 2));
    reqs.back()->params.max_tokens = 400;
  }
  testing::RunAll(*g, reqs);
  auto gr = g->CompileConstraint(tree);
  ASSERT_TRUE(gr.ok()) << gr.status().message();
  EXPECT_TRUE((*gr)->pushdown());
  int stopped = 0, deepest = 0;
  simdjson::dom::parser parser;
  for (const auto& r : reqs) {
    for (const CompletionOutput& o : r->outputs) {
      if (o.finish_reason == "length") continue;  // cut by max_tokens: a prefix
      ASSERT_EQ(o.finish_reason, "stop") << o.text;
      ++stopped;
      EXPECT_TRUE((*gr)->Matches(o.text)) << o.text;
      simdjson::dom::element e;
      ASSERT_EQ(parser.parse(o.text).get(e), simdjson::SUCCESS) << o.text;
      int depth = 0;
      EXPECT_TRUE(ValidTree(e, 0, &depth)) << o.text;
      deepest = std::max(deepest, depth);
    }
  }
  EXPECT_GE(stopped, 8);
  EXPECT_GE(deepest, 2);  // the recursion was used, not only the first level
}

TEST(StructuredGeneration, AdmissionErrors) {
  auto g = testing::LoadGenerator(DemoChat());
  ASSERT_NE(g, nullptr);
  structured::ConstraintSpec bad;
  bad.kind = structured::ConstraintSpec::Kind::kRegex;
  bad.field = "guided_regex";
  bad.text = "(?=x)";
  auto r = Constrained(*g->bundle().tokenizer, bad, 1);
  Status s = g->Add(r);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("guided_regex: regex: lookahead"), std::string::npos) << s.message();
  structured::ConstraintSpec ok;
  ok.kind = structured::ConstraintSpec::Kind::kJsonObject;
  ok.field = "response_format";
  auto m = Constrained(*g->bundle().tokenizer, ok, 1);
  m->params.min_tokens = 3;
  s = g->Add(m);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("min_tokens cannot be combined with response_format"),
            std::string::npos);
  auto e = Constrained(*g->bundle().tokenizer, ok, 1);
  e->params.ignore_eos = true;
  EXPECT_FALSE(g->Add(e).ok());
}

}  // namespace
}  // namespace sluice
