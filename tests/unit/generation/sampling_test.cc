// Sampling against transformers' distributions (tests/fixtures/generation/sampling.json):
// for fixed prompts' raw logits, 10,000 one-step draws per setting (temperature, top_k,
// top_p, min_p, repetition/presence/frequency penalties, logit_bias) follow the
// distribution transformers' processors and warpers give. Chi-square goodness of fit at
// significance 1e-3 (bins with an expected count under 5 pooled); tokens transformers masks
// are never drawn. Runs the backend's Sample on the test device.
#include <cmath>
#include <map>

#include "gen_util.h"

namespace sluice {
namespace {

// Upper critical value of chi-square with k degrees of freedom at p = 1e-3 (Wilson-Hilferty).
double ChiSquareCritical(int k) {
  const double z = 3.090232;  // one-sided normal quantile at 1e-3
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1 - a + z * std::sqrt(a), 3);
}

struct Setting {
  SamplingRow row;
  float presence = 0, frequency = 0;
  std::map<int32_t, float> bias;
};

Setting ReadSetting(simdjson::dom::object s) {
  Setting out;
  out.row.temperature = 1.f;
  for (auto kv : s) {
    const std::string k(kv.key);
    double v = 0;
    if (k == "logit_bias") {
      const simdjson::dom::object biases = kv.value.get_object().value();
      for (auto b : biases) {
        out.bias[std::stoi(std::string(b.key))] = static_cast<float>(b.value.get_double().value());
      }
      continue;
    }
    if (kv.value.get(v)) {
      int64_t i = kv.value.get_int64().value();
      v = static_cast<double>(i);
    }
    if (k == "temperature") out.row.temperature = static_cast<float>(v);
    if (k == "top_k") out.row.top_k = static_cast<int>(v);
    if (k == "top_p") out.row.top_p = static_cast<float>(v);
    if (k == "min_p") out.row.min_p = static_cast<float>(v);
    if (k == "repetition_penalty") out.row.repetition_penalty = static_cast<float>(v);
    if (k == "presence_penalty") out.presence = static_cast<float>(v);
    if (k == "frequency_penalty") out.frequency = static_cast<float>(v);
  }
  return out;
}

TEST(Sampling, MatchesTransformersDistributions) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(testing::kGenFixtures + "/sampling.json").value();
  const std::string model = std::string(doc["model"].get_string().value());
  BackendOptions bo;
  bo.device = testing::TestDevice();
  bo.num_threads = 2;
  auto backend = CreateBackend(bo);
  ASSERT_TRUE(backend.ok());
  Backend& be = **backend;
  const simdjson::dom::array settings = doc["settings"].get_array().value();
  const simdjson::dom::array cases = doc["cases"].get_array().value();
  constexpr int kDraws = 10000;
  int checked = 0;
  for (auto cs : cases) {
    const std::vector<int32_t> prompt = testing::Ints(cs["prompt"].value());
    const std::vector<int32_t> history = testing::Ints(cs["history"].value());
    const std::vector<float> logits = testing::Floats(cs["logits"].value());
    const int V = static_cast<int>(logits.size());
    const simdjson::dom::array dists = cs["dists"].get_array().value();
    size_t si = 0;
    for (auto d : dists) {
      const Setting st = ReadSetting(settings.at(si++).get_object().value());
      const std::vector<int32_t> ids = testing::Ints(d["ids"].value());
      const std::vector<float> probs = testing::Floats(d["probs"].value());
      std::vector<double> want(V, 0.0);
      for (size_t i = 0; i < ids.size(); ++i) want[ids[i]] = probs[i];
      // Adjustments as the generator builds them.
      std::map<int32_t, SamplingAdjust> adj;
      auto at = [&](int32_t t) -> SamplingAdjust& {
        adj[t].token = t;
        return adj[t];
      };
      if (st.row.repetition_penalty != 1.f) {
        for (int32_t t : prompt) at(t).repeat = 1;
        for (int32_t t : history) at(t).repeat = 1;
      }
      std::map<int32_t, int> counts;
      for (int32_t t : history) ++counts[t];
      for (const auto& [t, n] : counts) {
        if (st.presence != 0 || st.frequency != 0) {
          at(t).add -= st.presence + st.frequency * static_cast<float>(n);
        }
      }
      for (const auto& [t, b] : st.bias) at(t).add += b;
      std::vector<SamplingAdjust> adjusts;
      for (const auto& [t, a] : adj) adjusts.push_back(a);
      std::vector<SamplingRow> rows(kDraws, st.row);
      for (int i = 0; i < kDraws; ++i) {
        rows[i].seed = 42 + si;
        rows[i].counter = static_cast<uint64_t>(i);
        rows[i].adjust_begin = 0;
        rows[i].adjust_end = static_cast<int>(adjusts.size());
      }
      Buffer lb = be.Allocate(DType::kF32, kDraws, V);
      std::vector<float> all(static_cast<size_t>(kDraws) * V);
      for (int i = 0; i < kDraws; ++i) std::copy(logits.begin(), logits.end(), all.begin() + i * V);
      be.CopyFromHost(all.data(), lb.t());
      HostBuffer rb = be.AllocateHost(sizeof(SamplingRow) * kDraws);
      HostBuffer ab = be.AllocateHost(sizeof(SamplingAdjust) * std::max<size_t>(1, adjusts.size()));
      HostBuffer ob = be.AllocateHost(sizeof(SampledToken) * kDraws);
      std::copy(rows.begin(), rows.end(), rb.as<SamplingRow>());
      std::copy(adjusts.begin(), adjusts.end(), ab.as<SamplingAdjust>());
      SampleParams sp;
      sp.logits = lb.t();
      sp.num_rows = kDraws;
      sp.rows = rb.as<SamplingRow>();
      sp.adjusts = ab.as<SamplingAdjust>();
      sp.num_adjusts = static_cast<int>(adjusts.size());
      sp.out = ob.as<SampledToken>();
      be.Sample(sp);
      be.Synchronize();
      std::vector<int> seen(V, 0);
      for (int i = 0; i < kDraws; ++i) {
        const int t = sp.out[i].token;
        ASSERT_GE(t, 0);
        ASSERT_LT(t, V);
        ++seen[t];
      }
      // Never a token transformers masks.
      for (int t = 0; t < V; ++t) {
        EXPECT_FALSE(want[t] == 0 && seen[t] > 0)
            << "setting " << si - 1 << ": token " << t << " drawn " << seen[t]
            << " times, transformers gives it probability 0";
      }
      // Chi-square over bins of expected count >= 5 (the rest pooled into one bin).
      double chi = 0, pooled_e = 0, pooled_o = 0;
      int bins = 0;
      for (int t = 0; t < V; ++t) {
        const double e = want[t] * kDraws;
        if (e == 0) continue;
        if (e < 5) {
          pooled_e += e;
          pooled_o += seen[t];
          continue;
        }
        chi += (seen[t] - e) * (seen[t] - e) / e;
        ++bins;
      }
      if (pooled_e > 0) {
        chi += (pooled_o - pooled_e) * (pooled_o - pooled_e) / std::max(pooled_e, 1e-9);
        ++bins;
      }
      if (bins >= 2) {
        EXPECT_LT(chi, ChiSquareCritical(bins - 1))
            << "setting " << si - 1 << ": chi-square " << chi << " over " << bins << " bins";
      }
      ++checked;
    }
  }
  EXPECT_EQ(checked, 27);
  std::printf("[ sampling ] %d settings x prompts checked with %d draws each (%s logits)\n",
              checked, kDraws, model.c_str());
}

// Greedy rows: the argmax (the lowest id among equal maxima), and every row reports the
// chosen token's raw logprob and the top raw logprobs asked for, identical for identical rows.
TEST(Sampling, GreedyLogprobsAndTies) {
  BackendOptions bo;
  bo.device = testing::TestDevice();
  bo.num_threads = 2;
  auto backend = CreateBackend(bo);
  ASSERT_TRUE(backend.ok());
  Backend& be = **backend;
  const int V = 3000;
  std::vector<float> logits(2 * V);
  for (int i = 0; i < V; ++i) logits[i] = logits[V + i] = std::sin(0.37f * i);
  logits[17] = logits[2001] = 5.f;  // a tie: 17 wins
  logits[V + 17] = logits[V + 2001] = 5.f;
  Buffer lb = be.Allocate(DType::kF32, 2, V);
  be.CopyFromHost(logits.data(), lb.t());
  HostBuffer rb = be.AllocateHost(2 * sizeof(SamplingRow));
  HostBuffer ob = be.AllocateHost(2 * sizeof(SampledToken));
  SamplingRow r;
  r.num_logprobs = 4;
  rb.as<SamplingRow>()[0] = r;
  r.forced_token = 5;
  rb.as<SamplingRow>()[1] = r;
  SampleParams sp;
  sp.logits = lb.t();
  sp.num_rows = 2;
  sp.rows = rb.as<SamplingRow>();
  sp.out = ob.as<SampledToken>();
  be.Sample(sp);
  be.Synchronize();
  double z = 0;
  for (int i = 0; i < V; ++i) z += std::exp(static_cast<double>(logits[i]) - 5.0);
  const double lse = 5.0 + std::log(z);
  EXPECT_EQ(sp.out[0].token, 17);
  EXPECT_NEAR(sp.out[0].logprob, 5.0 - lse, 1e-4);
  ASSERT_EQ(sp.out[0].num_top, 4);
  EXPECT_EQ(sp.out[0].top_ids[0], 17);
  EXPECT_EQ(sp.out[0].top_ids[1], 2001);
  EXPECT_EQ(sp.out[1].token, 5);
  EXPECT_NEAR(sp.out[1].logprob, logits[5] - lse, 1e-4);
  for (int k = 0; k < 4; ++k) EXPECT_EQ(sp.out[1].top_ids[k], sp.out[0].top_ids[k]);
}

}  // namespace
}  // namespace sluice
