// Helpers of the generation tests: the fixtures written by tests/golden/generate_generation.py,
// a Generator on the test device (SLUICE_TEST_DEVICE=cuda runs them on a GPU), and running a
// set of requests to completion.
#pragma once

#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "engine/generator.h"

namespace sluice::testing {

inline const std::string kGenFixtures = std::string(SLUICE_FIXTURES_DIR) + "/generation";

inline DeviceKind TestDevice() {
  const char* d = std::getenv("SLUICE_TEST_DEVICE");
  return d != nullptr && std::string(d) == "cuda" ? DeviceKind::kCuda : DeviceKind::kCpu;
}
inline bool OnCuda() { return TestDevice() == DeviceKind::kCuda; }

struct GreedyRef {
  std::vector<int32_t> tokens;
  std::vector<std::vector<int32_t>> top_ids;
  std::vector<std::vector<float>> top_logprobs;
  std::vector<float> gap;  // top-1 minus top-2 logprob per step
};
struct PromptLogprobRef {
  float logprob = 0;
  std::vector<int32_t> top_ids;
  std::vector<float> top_logprobs;
};
struct GenCase {
  std::string name, dtype;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<GreedyRef> greedy, greedy_f32;
  std::vector<std::vector<PromptLogprobRef>> prompt_logprobs;
  std::vector<int32_t> eos_prompt, eos_tokens, eos_ids;
  std::string model_dir() const { return kGenFixtures + "/" + name + "/model"; }
};

// (Arrays bound to names: a range-for over a temporary simdjson array dangles.)
inline simdjson::dom::array Arr(simdjson::dom::element e) { return e.get_array().value(); }
inline std::vector<int32_t> Ints(simdjson::dom::element e) {
  std::vector<int32_t> v;
  const simdjson::dom::array a = Arr(e);
  for (auto x : a) v.push_back(static_cast<int32_t>(x.get_int64().value()));
  return v;
}
inline std::vector<float> Floats(simdjson::dom::element e) {
  std::vector<float> v;
  const simdjson::dom::array a = Arr(e);
  for (auto x : a) v.push_back(static_cast<float>(x.get_double().value()));
  return v;
}

inline std::vector<GreedyRef> ReadGreedy(simdjson::dom::element arr) {
  std::vector<GreedyRef> out;
  const simdjson::dom::array all = Arr(arr);
  for (auto g : all) {
    GreedyRef r;
    r.tokens = Ints(g["tokens"].value());
    const simdjson::dom::array ids = Arr(g["top_ids"].value());
    for (auto x : ids) r.top_ids.push_back(Ints(x));
    const simdjson::dom::array lps = Arr(g["top_logprobs"].value());
    for (auto x : lps) r.top_logprobs.push_back(Floats(x));
    r.gap = Floats(g["gap"].value());
    out.push_back(std::move(r));
  }
  return out;
}

inline GenCase LoadGenCase(const std::string& name) {
  GenCase c;
  c.name = name;
  static simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kGenFixtures + "/" + name + "/expected.json").value();
  c.dtype = std::string(doc["dtype"].get_string().value());
  const simdjson::dom::array prompts = Arr(doc["prompts"].value());
  for (auto p : prompts) c.prompts.push_back(Ints(p));
  c.greedy = ReadGreedy(doc["greedy"].value());
  simdjson::dom::element e;
  if (!doc["greedy_f32"].get(e)) c.greedy_f32 = ReadGreedy(e);
  if (!doc["prompt_logprobs"].get(e)) {
    const simdjson::dom::array all = Arr(e);
    for (auto rows : all) {
      std::vector<PromptLogprobRef> v;
      const simdjson::dom::array rs = Arr(rows);
      for (auto r : rs) {
        PromptLogprobRef p;
        p.logprob = static_cast<float>(r["logprob"].get_double().value());
        p.top_ids = Ints(r["top_ids"].value());
        p.top_logprobs = Floats(r["top_logprobs"].value());
        v.push_back(std::move(p));
      }
      c.prompt_logprobs.push_back(std::move(v));
    }
  }
  c.eos_prompt = Ints(doc["eos"]["prompt"].value());
  c.eos_tokens = Ints(doc["eos"]["tokens"].value());
  c.eos_ids = Ints(doc["eos"]["eos_token_id"].value());
  return c;
}

struct GenSetup {
  int64_t max_num_batched_tokens = 0;
  int max_num_seqs = 0;
  int64_t kv_cache_memory = 64 << 20;
  bool prefix_caching = true;
  int max_model_len = 0;
  std::optional<DType> dtype;
  bool batch_invariant = false;  // BackendOptions::batch_invariant (CUDA)
};

inline std::unique_ptr<Generator> LoadGenerator(const std::string& dir, const GenSetup& s = {}) {
  auto bundle = LoadModelBundle(dir);
  EXPECT_TRUE(bundle.ok()) << bundle.status().ToString();
  if (!bundle.ok()) return nullptr;
  GenerationOptions o;
  o.backend.device = TestDevice();
  o.backend.num_threads = 2;
  o.backend.batch_invariant = s.batch_invariant;
  o.max_num_batched_tokens = s.max_num_batched_tokens;
  o.max_num_seqs = s.max_num_seqs;
  o.kv_cache_memory = s.kv_cache_memory;
  o.prefix_caching = s.prefix_caching;
  o.max_model_len = s.max_model_len;
  o.dtype = s.dtype;
  auto g = Generator::Load(*bundle, o);
  EXPECT_TRUE(g.ok()) << g.status().ToString();
  return g.ok() ? std::move(g).value() : nullptr;
}

inline SamplingParams Greedy(int max_tokens, int logprobs = 0) {
  SamplingParams p;
  p.temperature = 0.f;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  if (logprobs > 0) p.logprobs = logprobs;
  return p;
}

inline std::shared_ptr<GenerateRequest> Request(std::vector<int32_t> prompt, SamplingParams p) {
  auto r = std::make_shared<GenerateRequest>();
  r->prompt = std::move(prompt);
  r->params = std::move(p);
  return r;
}

// Adds every request, steps until all are done; `each_step` runs after every step.
template <typename F>
void RunAll(Generator& g, const std::vector<std::shared_ptr<GenerateRequest>>& reqs, F each_step) {
  for (const auto& r : reqs) ASSERT_TRUE(g.Add(r).ok());
  int steps = 0;
  while (g.HasWork()) {
    ASSERT_TRUE(g.Step().ok());
    each_step();
    ASSERT_LT(++steps, 100000) << "no progress";
  }
}
inline void RunAll(Generator& g, const std::vector<std::shared_ptr<GenerateRequest>>& reqs) {
  RunAll(g, reqs, [] {});
}

}  // namespace sluice::testing
