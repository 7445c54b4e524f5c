// Parity with Hugging Face transformers: every case in tests/fixtures/golden/*.json
// (written by tests/golden/generate.py) is run through sluice's engine on the CPU and
// compared element-wise with the case's stated tolerance. SLUICE_TEST_DEVICE=cuda runs the
// same cases on the CUDA backend (device 0) with the same tolerances. The same test checks batch
// invariance: each input alone vs inside mixed batches, and duplicates bit-identical.
#include <gtest/gtest.h>
#include <simdjson.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "backend/cpu/attention.h"
#include "backend/cpu/cpu_features.h"
#include "engine/engine.h"
#include "golden_inputs.h"

namespace sluice {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = SLUICE_FIXTURES_DIR;

struct Case {
  std::string name;
  std::string task;
  std::string dtype;
  double tolerance = 1e-4;
  bool token_level = false;
  std::vector<TokenSequence> inputs;
  std::vector<std::vector<float>> outputs, raw, outputs_f32, outputs_truncated;
  std::vector<std::vector<int32_t>> token_indices;
  struct MaxSimPair {
    int q = 0, d = 0;
    double score = 0;
  };
  std::vector<MaxSimPair> maxsim;  // late interaction
  std::vector<std::string> labels;
  std::vector<float> thresholds;
  int dimensions = 0;
};

std::vector<float> Floats(simdjson::dom::element e) {
  std::vector<float> v;
  for (auto x : e.get_array()) v.push_back(static_cast<float>(x.get_double().value()));
  return v;
}

std::vector<std::vector<float>> FloatRows(simdjson::dom::element doc, const char* key) {
  std::vector<std::vector<float>> rows;
  simdjson::dom::array arr;
  if (doc[key].get(arr)) return rows;
  for (auto r : arr) rows.push_back(Floats(r));
  return rows;
}

Case LoadCase(const fs::path& path) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(path.string());
  Case c;
  c.name = std::string(doc["model"].get_string().value());
  c.task = std::string(doc["task"].get_string().value());
  c.dtype = std::string(doc["dtype"].get_string().value());
  c.tolerance = doc["tolerance"].get_double().value();
  bool tl;
  if (!doc["token_level"].get(tl)) c.token_level = tl;
  c.inputs = testing::GoldenInputs(doc);
  c.outputs = FloatRows(doc, "outputs");
  c.raw = FloatRows(doc, "raw");
  c.outputs_f32 = FloatRows(doc, "outputs_f32");
  c.outputs_truncated = FloatRows(doc, "outputs_truncated");
  int64_t dims;
  if (!doc["dimensions"].get(dims)) c.dimensions = static_cast<int>(dims);
  simdjson::dom::array arr;
  if (!doc["labels"].get(arr)) {
    for (auto l : arr) c.labels.emplace_back(l.get_string().value());
  }
  if (!doc["thresholds"].get(arr)) c.thresholds = Floats(doc["thresholds"]);
  if (!doc["maxsim"].get(arr)) {
    for (auto r : arr) {
      auto v = r.get_array();
      c.maxsim.push_back({static_cast<int>(v.at(0).get_int64()),
                          static_cast<int>(v.at(1).get_int64()), v.at(2).get_double()});
    }
  }
  if (!doc["token_indices"].get(arr)) {
    for (auto r : arr) {
      std::vector<int32_t> idx;
      for (auto i : r.get_array()) idx.push_back(static_cast<int32_t>(i.get_int64()));
      c.token_indices.push_back(idx);
    }
  }
  return c;
}

std::vector<std::string> CaseNames() {
  std::vector<std::string> names;
  const fs::path dir = fs::path(kFixtures) / "golden";
  if (!fs::exists(dir)) return names;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".json") names.push_back(e.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

using testing::TestDevice;

std::unique_ptr<Engine> LoadEngine(const Case& c, std::optional<DType> dtype = std::nullopt,
                                   int64_t max_batch_tokens = 8192,
                                   PrefixReuse prefix_reuse = PrefixReuse::kAuto,
                                   bool activation_residual = false) {
  EngineOptions o;
  o.prefix_reuse = prefix_reuse;
  o.activation_residual = activation_residual;
  o.model_dir = (fs::path(kFixtures) / "models" / c.name).string();
  o.dtype = dtype;
  o.max_batch_tokens = max_batch_tokens;
  o.backend.num_threads = 2;
  o.backend.device = TestDevice();
  auto e = Engine::Load(o);
  EXPECT_TRUE(e.ok()) << c.name << ": " << e.status().ToString();
  return e.ok() ? std::move(e).value() : nullptr;
}

double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - double(b[i])));
  return m;
}

void ExpectClose(const Case& c, const std::vector<PooledOutput>& got,
                 const std::vector<std::vector<float>>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << c.name;
  double worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = MaxAbsDiff(got[i].values, want[i]);
    EXPECT_LE(d, tol) << c.name << " " << what << " input " << i << " (size "
                      << got[i].values.size() << " vs " << want[i].size() << ")";
    worst = std::max(worst, d);
  }
  std::printf("[ parity ] %-28s %-12s max |diff| %.3g (tolerance %.0e)\n", c.name.c_str(), what,
              worst, tol);
}

// The engine's outputs as the reference reports them: embeddings of sentence-transformers
// pipelines that end in Normalize are normalised (the engine returns embeddings as the model
// computes them; the routes and `sluice embed` normalise by default).
StatusOr<std::vector<PooledOutput>> RunAsReference(Engine& engine,
                                                   const std::vector<TokenSequence>& inputs) {
  auto out = engine.Run(inputs);
  if (out.ok() && engine.head().task == Task::kEmbed && engine.head().st_normalize) {
    for (auto& o : *out) NormalizeRows(&o);
  }
  return out;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, MatchesTransformers) {
  const Case c = LoadCase(fs::path(kFixtures) / "golden" / (GetParam() + ".json"));
  auto engine = LoadEngine(c);
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(TaskName(engine->info().task), c.task == "score" ? std::string("score") : c.task);
  auto out = RunAsReference(*engine, c.inputs);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  ExpectClose(c, *out, c.outputs, c.tolerance, "outputs");
  if (!c.raw.empty()) {
    std::vector<PooledOutput> raw(out->size());
    for (size_t i = 0; i < raw.size(); ++i) raw[i].values = (*out)[i].raw;
    ExpectClose(c, raw, c.raw, c.tolerance * 10, "logits");
  }
  if (!c.labels.empty()) {
    EXPECT_EQ(engine->head().labels, c.labels);
  }
  if (!c.thresholds.empty()) {
    EXPECT_EQ(engine->head().thresholds, c.thresholds);
  }
  if (!c.maxsim.empty()) {
    // Late interaction: MaxSim of the engine's token vectors.
    double worst = 0;
    for (const auto& m : c.maxsim) {
      const double d = std::fabs(MaxSim((*out)[m.q], (*out)[m.d]) - m.score);
      EXPECT_LE(d, c.tolerance * 10) << c.name << " maxsim " << m.q << " " << m.d;
      worst = std::max(worst, d);
    }
    std::printf("[ parity ] %-28s %-12s max |diff| %.3g (tolerance %.0e)\n", c.name.c_str(),
                "maxsim", worst, c.tolerance * 10);
  }
  if (!c.token_indices.empty()) {
    for (size_t i = 0; i < c.token_indices.size(); ++i) {
      EXPECT_EQ((*out)[i].token_indices, c.token_indices[i]) << "input " << i;
    }
  }
  if (c.dimensions > 0) {
    // Matryoshka: the first `dimensions` values, renormalised.
    std::vector<PooledOutput> t = *out;
    for (auto& o : t) {
      o.values.resize(c.dimensions);
      L2Normalize(o.values.data(), c.dimensions);
    }
    ExpectClose(c, t, c.outputs_truncated, c.tolerance, "matryoshka");
  }
  if (c.dtype == "bf16") {
    // The residual stream in the activation dtype (bf16 on CUDA, as transformers keeps it;
    // f32 on the CPU, where this is the default path) is within the same bf16 tolerance.
    auto eh = LoadEngine(c, std::nullopt, 8192, PrefixReuse::kAuto, /*activation_residual=*/true);
    ASSERT_NE(eh, nullptr);
    auto oh = RunAsReference(*eh, c.inputs);
    ASSERT_TRUE(oh.ok()) << oh.status().ToString();
    ExpectClose(c, *oh, c.outputs, c.tolerance, "activation-residual");
    if (TestDevice() == DeviceKind::kCpu) {
      // bf16 inner activations (encoders on CPU: QKV, attention output and MLP intermediate,
      // and ModernBERT's normed GEMM inputs, stored as bf16) against all-f32 activations
      // (SLUICE_CPU_ACTIVATIONS=f32): both within the bf16 tolerance, and different bits
      // exactly where the model uses them (not the decoders).
      setenv("SLUICE_CPU_ACTIVATIONS", "f32", 1);
      auto ef = LoadEngine(c);
      unsetenv("SLUICE_CPU_ACTIVATIONS");
      ASSERT_NE(ef, nullptr);
      auto of = RunAsReference(*ef, c.inputs);
      ASSERT_TRUE(of.ok()) << of.status().ToString();
      ExpectClose(c, *of, c.outputs, c.tolerance, "f32-activations");
      const bool inner = c.name.rfind("bert", 0) == 0 || c.name.rfind("roberta", 0) == 0 ||
                         c.name.rfind("xlmr", 0) == 0 || c.name.rfind("modernbert", 0) == 0;
      bool differs = false;
      for (size_t i = 0; i < out->size(); ++i) differs |= (*out)[i].values != (*of)[i].values;
      EXPECT_EQ(inner, differs) << c.name << ": bf16 inner activations "
                                << (inner ? "changed nothing" : "changed a model without them");
    }
  }
  if (!c.outputs_f32.empty()) {
    // The bf16 checkpoint converted to f32 on request must match HF's fp32 run tightly.
    auto e32 = LoadEngine(c, DType::kF32);
    ASSERT_NE(e32, nullptr);
    EXPECT_EQ(e32->info().compute_dtype, DType::kF32);
    auto o32 = RunAsReference(*e32, c.inputs);
    ASSERT_TRUE(o32.ok()) << o32.status().ToString();
    ExpectClose(c, *o32, c.outputs_f32, 1e-4, "as-f32");
  }
  if (c.token_level && c.dtype == "f32" && TestDevice() == DeviceKind::kCuda) {
    // Token-level models in bf16 on CUDA (the encoder and the token head on tensor cores)
    // against transformers' fp32 outputs, within the bf16 tolerance of the bf16 fixtures
    // (3e-2), relative to the outputs' scale where they are unnormalised hidden states
    // (pooling ALL/STEP, values up to ~4: measured 0.041-0.046 on an H100).
    double scale = 1.0;
    for (const auto& o : c.outputs) {
      for (float v : o) scale = std::max(scale, static_cast<double>(std::fabs(v)));
    }
    auto eb = LoadEngine(c, DType::kBF16);
    ASSERT_NE(eb, nullptr);
    auto ob = RunAsReference(*eb, c.inputs);
    ASSERT_TRUE(ob.ok()) << ob.status().ToString();
    ExpectClose(c, *ob, c.outputs, 3e-2 * scale, "bf16");
  }
}

// Each input alone vs inside mixed batches (shuffled, varied lengths, duplicates):
// within 1e-5 in fp32 and duplicates bit-identical.
TEST_P(GoldenTest, BatchInvariance) {
  const Case c = LoadCase(fs::path(kFixtures) / "golden" / (GetParam() + ".json"));
  auto engine = LoadEngine(c, DType::kF32);
  ASSERT_NE(engine, nullptr);
  std::vector<PooledOutput> alone(c.inputs.size());
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    ASSERT_TRUE(engine->RunBatch({&c.inputs[i]}, &alone[i]).ok());
  }
  std::mt19937 rng(7);
  for (int round = 0; round < 3; ++round) {
    std::vector<size_t> order(c.inputs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    // Add duplicates of a few inputs inside the same batch.
    for (size_t d = 0; d < 8; ++d) order.push_back(order[d * 3 % c.inputs.size()]);
    std::vector<const TokenSequence*> batch;
    for (size_t i : order) batch.push_back(&c.inputs[i]);
    std::vector<PooledOutput> mixed(batch.size());
    ASSERT_TRUE(engine->RunBatch(batch, mixed.data()).ok());
    for (size_t j = 0; j < order.size(); ++j) {
      const auto& a = alone[order[j]].values;
      const auto& b = mixed[j].values;
      ASSERT_EQ(a.size(), b.size());
      EXPECT_LE(MaxAbsDiff(a, b), 1e-5) << c.name << " input " << order[j] << " round " << round;
    }
    for (size_t j = 0; j < order.size(); ++j) {
      for (size_t k = j + 1; k < order.size(); ++k) {
        if (order[j] == order[k] || c.inputs[order[j]].ids == c.inputs[order[k]].ids) {
          if (c.inputs[order[j]].type_ids != c.inputs[order[k]].type_ids ||
              c.inputs[order[j]].attended != c.inputs[order[k]].attended) {
            continue;
          }
          EXPECT_EQ(mixed[j].values, mixed[k].values)
              << c.name << ": duplicates differ (inputs " << order[j] << ", " << order[k] << ")";
        }
      }
    }
  }
}

// Shared-prefix reuse: the same outputs with prefixes computed once (on) as computed in
// full (off) -- bit for bit on the CPU, within 1e-5 in fp32 on CUDA (GEMMs over other row
// counts may round differently) -- with duplicates bit-identical, for
//  1. a batch whose inputs all start with one template (one group: the whole batch), and
//  2. a batch of several groups: two queries each repeated over many documents after the
//     template (with a duplicate and a one-token document), a run sharing only the
//     template, and sequences sharing nothing in between.
// Causal last-token models report at least the tokens those groups save.
TEST_P(GoldenTest, SharedPrefixReuse) {
  const Case c = LoadCase(fs::path(kFixtures) / "golden" / (GetParam() + ".json"));
  auto off = LoadEngine(c, DType::kF32, 8192, PrefixReuse::kOff);
  auto on = LoadEngine(c, DType::kF32, 8192, PrefixReuse::kOn);
  ASSERT_NE(off, nullptr);
  ASSERT_NE(on, nullptr);
  EXPECT_FALSE(off->prefix_reuse());
  size_t longest = 0;
  std::vector<int32_t> pool;  // token ids valid for the model
  for (const auto& in : c.inputs) {
    longest = std::max(longest, in.ids.size());
    pool.insert(pool.end(), in.ids.begin(), in.ids.end());
  }
  const int limit = off->info().max_sequence_length;
  const int room = limit - static_cast<int>(longest) - 1;
  const int P = std::min(12, room);  // template length of batch 1
  const int T = 8, Q = 6;            // template and query lengths of batch 2
  if (P < 5) GTEST_SKIP() << "no room for a prefix under the model's length limit";
  const bool exact = TestDevice() == DeviceKind::kCpu;
  auto make = [&](std::initializer_list<const std::vector<int32_t>*> parts,
                  const TokenSequence& in) {
    TokenSequence x;
    for (const auto* p : parts) x.ids.insert(x.ids.end(), p->begin(), p->end());
    if (!in.type_ids.empty()) x.type_ids.assign(x.ids.size(), 0);
    x.ids.insert(x.ids.end(), in.ids.begin(), in.ids.end());
    x.type_ids.insert(x.type_ids.end(), in.type_ids.begin(), in.type_ids.end());
    return x;
  };
  // Runs `inputs` (one batch) with reuse off and on; `dups` are index pairs that must be
  // bit-identical; returns the tokens saved.
  auto check = [&](const std::vector<TokenSequence>& inputs,
                   const std::vector<std::pair<size_t, size_t>>& dups, const char* what) {
    const PrefixReuseStats before = on->prefix_reuse_stats();
    auto a = off->Run(inputs);
    auto b = on->Run(inputs);
    EXPECT_TRUE(a.ok()) << a.status().ToString();
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    if (!a.ok() || !b.ok()) return int64_t{0};
    double worst = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (exact) {
        EXPECT_EQ((*a)[i].values, (*b)[i].values) << c.name << " " << what << " input " << i;
      }
      const double d = MaxAbsDiff((*a)[i].values, (*b)[i].values);
      EXPECT_LE(d, 1e-5) << c.name << " " << what << " input " << i;
      worst = std::max(worst, d);
    }
    for (const auto& [x, y] : dups) {
      EXPECT_EQ((*b)[x].values, (*b)[y].values) << what << ": duplicates differ";
    }
    const int64_t groups = on->prefix_reuse_stats().groups - before.groups;
    const int64_t saved = on->prefix_reuse_stats().tokens_saved - before.tokens_saved;
    std::printf(
        "[ prefix ] %-28s %-7s reuse %-3s %2lld groups, %4lld tokens saved, max |diff| "
        "vs full %.3g\n",
        c.name.c_str(), what, on->prefix_reuse() ? "on" : "off", static_cast<long long>(groups),
        static_cast<long long>(saved), worst);
    return saved;
  };

  // 1. One template before every input, a duplicate, the template plus one token.
  std::vector<int32_t> prefix(pool.begin(), pool.begin() + P);
  std::vector<TokenSequence> inputs;
  for (const auto& in : c.inputs) inputs.push_back(make({&prefix}, in));
  inputs.push_back(inputs[0]);
  TokenSequence one;
  one.ids = {pool[0]};
  inputs.push_back(make({&prefix}, one));
  const int64_t saved1 = check(inputs, {{0, inputs.size() - 2}}, "all");
  if (on->prefix_reuse()) {
    EXPECT_GE(saved1, static_cast<int64_t>(P) * static_cast<int64_t>(inputs.size() - 1));
  } else {
    EXPECT_EQ(saved1, 0);
  }

  // 2. Several groups in one batch, of the inputs that fit after template + query.
  std::vector<TokenSequence> fit;
  for (const auto& in : c.inputs) {
    if (static_cast<int>(in.ids.size()) + T + Q <= limit) fit.push_back(in);
  }
  ASSERT_GE(fit.size(), 8u) << "too few inputs fit under the length limit";
  const std::vector<int32_t> tmpl(pool.begin(), pool.begin() + T);
  const std::vector<int32_t> qa(pool.begin() + T, pool.begin() + T + Q);
  std::vector<int32_t> qb(qa.rbegin(), qa.rend());
  for (int32_t t : pool) {
    if (t != qa[0]) {
      qb[0] = t;  // the queries differ from their first token
      break;
    }
  }
  ASSERT_NE(qa[0], qb[0]);
  const size_t N = fit.size(), half = N / 2;
  inputs.clear();
  inputs.push_back(fit[0]);  // shares nothing
  for (size_t i = 0; i < half; ++i) inputs.push_back(make({&tmpl, &qa}, fit[i]));
  const size_t dup_a = inputs.size() - 1;
  inputs.push_back(inputs[dup_a]);
  inputs.push_back(make({&tmpl, &qa}, one));
  const int64_t members_a = static_cast<int64_t>(half) + 2;
  inputs.push_back(fit[1]);  // shares nothing
  for (size_t i = half; i < N; ++i) inputs.push_back(make({&tmpl, &qb}, fit[i]));
  const int64_t members_b = static_cast<int64_t>(N - half);
  for (size_t i : {size_t{2}, size_t{3}, size_t{5}})
    inputs.push_back(make({&tmpl}, fit[i]));  // template only
  inputs.push_back(fit[4]);
  const int64_t saved2 = check(inputs, {{dup_a, dup_a + 1}}, "groups");
  if (on->prefix_reuse()) {
    // At least what these groups save (the grouping saves the most it can find).
    EXPECT_GE(saved2, (members_a - 1 + members_b - 1) * (T + Q) + 2 * T);
  } else {
    EXPECT_EQ(saved2, 0);
  }
}

// Cosine similarity of a and b over [i0, i1).
double Cosine(const std::vector<float>& a, const std::vector<float>& b, size_t i0, size_t i1) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = i0; i < i1; ++i) {
    ab += double(a[i]) * b[i];
    aa += double(a[i]) * a[i];
    bb += double(b[i]) * b[i];
  }
  return aa == 0 && bb == 0 ? 1.0 : ab / std::sqrt(aa * bb);
}

// --dtype int8 (linear layers int8 per-channel, activations quantised per token) against the
// same model in f32, on every scoring fixture. Bounds, chosen from measurement
// (docs/benchmarks.md, "CPU int8": measured worst 1.3e-2 and 0.9988): scores, probabilities and
// token-level outputs within kInt8MaxDiff of f32; embeddings (pooled or per token) at cosine >=
// kInt8MinCosine. int8 must really run: the engine reports int8 as the compute dtype and the int8
// kernel on the linear layers, and the outputs differ from f32 (a silent f32 fallback would be
// exact).
constexpr double kInt8MaxDiff = 2e-2;
constexpr double kInt8MinCosine = 0.995;

TEST_P(GoldenTest, Int8WithinBoundOfF32) {
  const Case c = LoadCase(fs::path(kFixtures) / "golden" / (GetParam() + ".json"));
  if (TestDevice() != DeviceKind::kCpu) {
    EngineOptions o;
    o.model_dir = (fs::path(kFixtures) / "models" / c.name).string();
    o.dtype = DType::kI8;
    o.backend.device = TestDevice();
    auto e = Engine::Load(o);
    ASSERT_FALSE(e.ok()) << "int8 must be refused off the CPU";
    EXPECT_NE(e.status().message().find("CPU only"), std::string::npos) << e.status().ToString();
    return;
  }
  auto e32 = LoadEngine(c, DType::kF32);
  auto e8 = LoadEngine(c, DType::kI8);
  ASSERT_NE(e32, nullptr);
  ASSERT_NE(e8, nullptr);
  const ModelInfo& info = e8->info();
  EXPECT_EQ(info.compute_dtype, DType::kI8);
  // Every transformer layer has 4 GEMMs (fused QKV, output projection, two MLP ones).
  const std::string& lin = info.linear_layers;
  const size_t at = lin.find("int8 sluice-int8(");
  ASSERT_NE(at, std::string::npos) << lin;
  const size_t x = lin.find(" x", at);
  ASSERT_NE(x, std::string::npos) << lin;
  EXPECT_GE(std::stoi(lin.substr(x + 2)), 4 * info.num_layers) << lin;
  // No GEMM computes in bf16 (entries "DTYPE PATH xN, ..."; a path's ISA name such as
  // oneDNN-brgemm(avx512_bf16) for the f32 head is not a bf16 GEMM).
  for (size_t b = 0; b < lin.size();) {
    size_t e = lin.find(", ", b);
    if (e == std::string::npos) e = lin.size();
    EXPECT_NE(lin.compare(b, 5, "bf16 "), 0) << lin;
    b = e + 2;
  }
  const char* cap = std::getenv("SLUICE_CPU_MAX_ISA");
  if (cap && std::string(cap) == "avx2") {
    EXPECT_NE(lin.find("sluice-int8(portable)"), std::string::npos) << lin;
  }
  auto o32 = RunAsReference(*e32, c.inputs);
  auto o8 = RunAsReference(*e8, c.inputs);
  ASSERT_TRUE(o32.ok()) << o32.status().ToString();
  ASSERT_TRUE(o8.ok()) << o8.status().ToString();
  const bool vectors = c.task == "embed" || !c.maxsim.empty();
  const size_t dim = static_cast<size_t>(e8->head().output_dim);
  double worst_diff = 0, worst_cos = 1, sum_diff = 0;
  size_t n = 0;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const auto& a = (*o32)[i].values;
    const auto& b = (*o8)[i].values;
    ASSERT_EQ(a.size(), b.size()) << c.name << " input " << i;
    const double d = MaxAbsDiff(a, b);
    worst_diff = std::max(worst_diff, d);
    sum_diff += d;
    ++n;
    if (vectors) {
      const size_t w = dim > 0 && a.size() % dim == 0 ? dim : a.size();
      for (size_t r = 0; r + w <= a.size() && w > 0; r += w) {
        const double cs = Cosine(a, b, r, r + w);
        worst_cos = std::min(worst_cos, cs);
        EXPECT_GE(cs, kInt8MinCosine) << c.name << " input " << i << " row " << r / w;
      }
    } else {
      EXPECT_LE(d, kInt8MaxDiff) << c.name << " input " << i;
    }
  }
  EXPECT_GT(worst_diff, 0) << c.name << ": int8 outputs equal f32 bit for bit (not int8?)";
  // Activations are quantised per token: a sequence alone gives the same bits as batched.
  for (size_t i = 0; i < std::min<size_t>(4, c.inputs.size()); ++i) {
    PooledOutput alone;
    ASSERT_TRUE(e8->RunBatch({&c.inputs[i]}, &alone).ok());
    if (e8->head().task == Task::kEmbed && e8->head().st_normalize) NormalizeRows(&alone);
    EXPECT_EQ(alone.values, (*o8)[i].values) << c.name << " input " << i << " alone vs batched";
  }
  std::printf(
      "[ int8   ] %-28s %-8s max |diff| %.3g, mean of per-input max %.3g, min cosine %.5f\n",
      c.name.c_str(), vectors ? "vectors" : "scores", worst_diff,
      n ? sum_diff / static_cast<double>(n) : 0.0, worst_cos);
}

// bf16 and int8 models' attention with bf16 products on AMX tiles (docs/models.md "Attention
// on CPU"): on AMX hardware the tiles, elsewhere (AVX512-BF16) the same driver with the tiles
// emulated. bf16 checkpoints stay within their HF tolerance, int8 within its bound of f32; a
// sequence alone gives the bits it gives batched; and the products really run (the outputs
// differ from the f32-attention ones).
TEST_P(GoldenTest, AmxAttentionWithinBounds) {
  const Case c = LoadCase(fs::path(kFixtures) / "golden" / (GetParam() + ".json"));
  if (TestDevice() != DeviceKind::kCpu) GTEST_SKIP() << "CPU attention";
  const bool amx = cpu::AmxAttentionAvailable();
  if (!amx && !cpu::RawFeatures().avx512_bf16) GTEST_SKIP() << "no AMX or AVX512-BF16";
  struct Emulation {  // only where there is no AMX; off again at the end
    explicit Emulation(bool on) { cpu::SetAttentionAmxEmulationForTesting(on); }
    ~Emulation() { cpu::SetAttentionAmxEmulationForTesting(false); }
  } emulation(!amx);
  const bool bf16 = c.dtype == "bf16";
  auto e = LoadEngine(c, bf16 ? std::nullopt : std::optional<DType>(DType::kI8));
  ASSERT_NE(e, nullptr);
  auto out = RunAsReference(*e, c.inputs);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  std::vector<PooledOutput> f32_attention;
  {
    cpu::SetAttentionAmxEmulationForTesting(false);
    setenv("SLUICE_CPU_ATTENTION", "f32", 1);
    auto o = RunAsReference(*e, c.inputs);
    unsetenv("SLUICE_CPU_ATTENTION");
    cpu::SetAttentionAmxEmulationForTesting(!amx);
    ASSERT_TRUE(o.ok()) << o.status().ToString();
    f32_attention = std::move(*o);
  }
  bool differs = false;
  for (size_t i = 0; i < out->size(); ++i) differs |= (*out)[i].values != f32_attention[i].values;
  EXPECT_TRUE(differs) << c.name << ": bf16 products gave the f32 attention's bits";
  if (bf16) {
    ExpectClose(c, *out, c.outputs, c.tolerance, amx ? "amx-attention" : "amx-attention(emu)");
  } else {
    auto e32 = LoadEngine(c, DType::kF32);
    ASSERT_NE(e32, nullptr);
    auto o32 = RunAsReference(*e32, c.inputs);
    ASSERT_TRUE(o32.ok()) << o32.status().ToString();
    const bool vectors = c.task == "embed" || !c.maxsim.empty();
    const size_t dim = static_cast<size_t>(e->head().output_dim);
    double worst = 0;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      const auto& a = (*o32)[i].values;
      const auto& b = (*out)[i].values;
      ASSERT_EQ(a.size(), b.size());
      worst = std::max(worst, MaxAbsDiff(a, b));
      if (vectors) {
        const size_t w = dim > 0 && a.size() % dim == 0 ? dim : a.size();
        for (size_t r = 0; r + w <= a.size() && w > 0; r += w) {
          EXPECT_GE(Cosine(a, b, r, r + w), kInt8MinCosine) << c.name << " input " << i;
        }
      } else {
        EXPECT_LE(MaxAbsDiff(a, b), kInt8MaxDiff) << c.name << " input " << i;
      }
    }
    std::printf("[ int8+amx attention%s ] %-28s max |diff| vs f32 %.3g\n", amx ? "" : " (emu)",
                c.name.c_str(), worst);
  }
  for (size_t i = 0; i < std::min<size_t>(4, c.inputs.size()); ++i) {
    PooledOutput alone;
    ASSERT_TRUE(e->RunBatch({&c.inputs[i]}, &alone).ok());
    if (e->head().task == Task::kEmbed && e->head().st_normalize) NormalizeRows(&alone);
    EXPECT_EQ(alone.values, (*out)[i].values) << c.name << " input " << i << " alone vs batched";
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenTest, ::testing::ValuesIn(CaseNames()),
                         [](const auto& p) { return p.param; });

// `--profile` (a ProfilingBackend around the device backend) changes timings only: a bf16
// encoder gives the same bits profiled or not (the wrapper forwards the backend's activation
// dtypes; once it did not, and a profiled bf16 encoder silently ran f32 inner activations).
TEST(Profiling, SameBitsAsUnprofiled) {
  for (const char* name : {"bert_cross_encoder_bf16", "modernbert_classifier_bf16"}) {
    const Case c = LoadCase(fs::path(kFixtures) / "golden" / (std::string(name) + ".json"));
    std::vector<PooledOutput> outs[2];
    for (int profiled = 0; profiled < 2; ++profiled) {
      EngineOptions o;
      o.model_dir = (fs::path(kFixtures) / "models" / c.name).string();
      o.backend.num_threads = 2;
      o.backend.device = TestDevice();
      o.profile = profiled == 1;
      auto e = Engine::Load(o);
      ASSERT_TRUE(e.ok()) << e.status().ToString();
      auto out = (*e)->Run(c.inputs);
      ASSERT_TRUE(out.ok()) << out.status().ToString();
      outs[profiled] = std::move(*out);
    }
    ASSERT_EQ(outs[0].size(), outs[1].size());
    for (size_t i = 0; i < outs[0].size(); ++i) {
      EXPECT_EQ(outs[0][i].values, outs[1][i].values) << name << " input " << i;
    }
  }
}

TEST(GoldenFixtures, Present) { EXPECT_GE(CaseNames().size(), 28u); }

// Key limits through the models (TokenSequence::attended, ColBERT expansion tokens that no
// token attends to) on token-level fixtures of both encoder families: the tokens before the
// limit get what they get when the tokens after it are absent, the tokens after it still get
// rows (other than those of a run where they are attended), and a limited sequence is the same
// alone and inside a batch.
TEST(KeyLimits, TokensPastTheLimitAreNoKeys) {
  for (const char* name : {"bert_late_interaction", "modernbert_tokcls", "bert_pool_all"}) {
    const fs::path path = fs::path(kFixtures) / "golden" / (std::string(name) + ".json");
    ASSERT_TRUE(fs::exists(path)) << path;
    const Case c = LoadCase(path);
    auto engine = LoadEngine(c, DType::kF32);
    ASSERT_NE(engine, nullptr);
    size_t pick = 0;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i].ids.size() > c.inputs[pick].ids.size()) pick = i;
    }
    const TokenSequence& full = c.inputs[pick];
    const size_t n = full.ids.size(), k = n / 2;
    ASSERT_GE(k, 3u) << name;
    TokenSequence limited = full, cut;
    limited.attended = static_cast<int32_t>(k);
    cut.ids.assign(full.ids.begin(), full.ids.begin() + static_cast<long>(k));
    if (!full.type_ids.empty()) {
      cut.type_ids.assign(full.type_ids.begin(), full.type_ids.begin() + static_cast<long>(k));
    }
    auto out = engine->Run({limited, cut, full});
    ASSERT_TRUE(out.ok()) << name << ": " << out.status().ToString();
    const PooledOutput &a = (*out)[0], &b = (*out)[1], &f = (*out)[2];
    ASSERT_EQ(a.rows, static_cast<int>(n)) << name << ": every token keeps its row";
    ASSERT_EQ(b.rows, static_cast<int>(k));
    const size_t dim = a.values.size() / n;
    const std::vector<float> head(a.values.begin(), a.values.begin() + static_cast<long>(k * dim));
    EXPECT_LE(MaxAbsDiff(head, b.values), 1e-5) << name << ": tokens before the limit";
    const std::vector<float> tail_a(a.values.begin() + static_cast<long>(k * dim), a.values.end());
    const std::vector<float> tail_f(f.values.begin() + static_cast<long>(k * dim), f.values.end());
    EXPECT_GT(MaxAbsDiff(tail_a, tail_f), 1e-4) << name << ": the limit changed nothing";
    std::vector<const TokenSequence*> batch = {&c.inputs[0], &limited, &full, &limited};
    std::vector<PooledOutput> mixed(batch.size());
    ASSERT_TRUE(engine->RunBatch(batch, mixed.data()).ok());
    EXPECT_LE(MaxAbsDiff(mixed[1].values, a.values), 1e-5) << name << ": alone vs batch";
    EXPECT_EQ(mixed[1].values, mixed[3].values) << name << ": duplicates";
  }
  // A model that cannot leave keys out refuses such an input at admission.
  const Case q = LoadCase(fs::path(kFixtures) / "golden" / "qwen3_pool_mean.json");
  auto causal = LoadEngine(q, DType::kF32);
  ASSERT_NE(causal, nullptr);
  TokenSequence s = q.inputs[0];
  s.attended = 1;
  auto r = causal->Run({s});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("leave tokens out"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace sluice
