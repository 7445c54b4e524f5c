// Sparse allow-lists in Backend::Sample (SamplingRow::allowed_begin, plugin ABI 1.3
// fill_allowed): a row with a list of allowed token ids samples exactly as the same row with
// the equivalent bitmask (greedy and seeded draws, top_k, adjustments, raw logprobs and top
// logprobs), duplicates and rows without either in the same batch; on the CUDA backend (the
// list uploaded and applied in the sample kernel) and on the CPU backend, and CUDA's greedy
// picks equal the CPU's. The CUDA test skips where no device is present.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "backend/backend.h"

namespace sluice {
namespace {

constexpr int kV = 5003;  // not a multiple of 32: the bitmask's last word is partial
constexpr int kW = (kV + 31) / 32;

// Row pairs (2i: bitmask, 2i + 1: the same tokens as a sparse list), then a row with neither.
struct Case {
  std::vector<int32_t> ids;  // may hold duplicates
  float temperature;
  int top_k;
  int num_logprobs;
  bool adjust;  // a logit_bias on the first id and a -inf on the second
};

// How SampleBatch hands the masks and allow-lists over: in Sample only, staged first
// (StageSampleInputs with the same buffers), or staged from other buffers (Sample must not use
// that copy).
enum class Stage { kNone, kSame, kOther };

std::vector<SampledToken> SampleBatch(Backend& be, const std::vector<Case>& cases,
                                      const std::vector<float>& base, uint64_t counter,
                                      Stage stage = Stage::kNone) {
  const int pairs = static_cast<int>(cases.size());
  const int n = 2 * pairs + 1;
  std::vector<float> logits(static_cast<size_t>(n) * kV);
  for (int r = 0; r < n; ++r) {
    const int src = r < 2 * pairs ? r / 2 : pairs;  // a pair shares its logits
    for (int i = 0; i < kV; ++i) logits[static_cast<size_t>(r) * kV + i] = base[src * kV + i];
  }
  Buffer lb = be.Allocate(DType::kF32, n, kV);
  be.CopyFromHost(logits.data(), lb.t());
  HostBuffer rb = be.AllocateHost(sizeof(SamplingRow) * n);
  HostBuffer ab = be.AllocateHost(sizeof(SamplingAdjust) * 2 * pairs);
  HostBuffer mb = be.AllocateHost(sizeof(uint32_t) * kW * pairs);
  HostBuffer ib = be.AllocateHost(sizeof(int32_t) * kV * pairs);
  HostBuffer ob = be.AllocateHost(sizeof(SampledToken) * n);
  auto* rows = rb.as<SamplingRow>();
  auto* adj = ab.as<SamplingAdjust>();
  auto* masks = mb.as<uint32_t>();
  auto* ids = ib.as<int32_t>();
  int num_adj = 0, num_ids = 0, max_lp = 0;
  for (int c = 0; c < pairs; ++c) {
    const Case& k = cases[static_cast<size_t>(c)];
    uint32_t* m = masks + c * kW;
    std::fill(m, m + kW, 0u);
    for (int32_t t : k.ids) m[t / 32] |= 1u << (t % 32);
    SamplingRow row;
    row.temperature = k.temperature;
    row.top_k = k.top_k;
    row.seed = 1000 + static_cast<uint64_t>(c);
    row.counter = counter;
    row.num_logprobs = k.num_logprobs;
    max_lp = std::max(max_lp, k.num_logprobs);
    if (k.adjust) {
      row.adjust_begin = num_adj;
      adj[num_adj++] = {k.ids[0], 0, 2.5f};
      if (k.ids.size() > 1 && k.ids[1] != k.ids[0]) {
        adj[num_adj++] = {k.ids[1], 0, -INFINITY};
      }
      row.adjust_end = num_adj;
    }
    SamplingRow bits = row;
    bits.mask_row = c;
    SamplingRow sparse = row;
    sparse.allowed_begin = num_ids;
    for (int32_t t : k.ids) ids[num_ids++] = t;
    sparse.allowed_end = num_ids;
    rows[2 * c] = bits;
    rows[2 * c + 1] = sparse;
  }
  SamplingRow plain;
  plain.temperature = 0.7f;
  plain.seed = 5;
  plain.counter = counter;
  rows[n - 1] = plain;
  SampleParams p;
  p.logits = lb.t();
  p.num_rows = n;
  p.rows = rows;
  p.adjusts = adj;
  p.num_adjusts = num_adj;
  p.max_logprobs = max_lp;
  p.out = ob.as<SampledToken>();
  p.masks = masks;
  p.num_masks = pairs;
  p.mask_words = kW;
  p.allowed = ids;
  p.num_allowed = num_ids;
  HostBuffer other_m = be.AllocateHost(sizeof(uint32_t) * kW * pairs);
  HostBuffer other_i = be.AllocateHost(sizeof(int32_t) * kV * pairs);
  if (stage == Stage::kSame) {
    be.StageSampleInputs(p);
  } else if (stage == Stage::kOther) {  // zeros: sampled from, they would allow no token
    std::fill(other_m.as<uint32_t>(), other_m.as<uint32_t>() + kW * pairs, 0u);
    std::fill(other_i.as<int32_t>(), other_i.as<int32_t>() + kV * pairs, 0);
    SampleParams q = p;
    q.masks = other_m.as<uint32_t>();
    q.allowed = other_i.as<int32_t>();
    be.StageSampleInputs(q);
  }
  be.Sample(p);
  be.Synchronize();
  return std::vector<SampledToken>(p.out, p.out + n);
}

std::vector<Case> Cases() {
  return {
      {{3, 7, 900, 5002}, 0.f, 0, 0, false},              // greedy
      {{3, 7, 900, 5002, 41, 42, 43}, 1.f, 0, 3, false},  // sampled, logprobs
      {{11, 11, 11, 12, 4096}, 0.9f, 2, 0, false},        // duplicates, top_k
      {{100, 200, 300, 400, 500}, 0.8f, 0, 2, true},      // adjustments
      {{17}, 0.f, 0, 1, false},                           // one token
      {{4999, 5000, 5001, 5002, 0, 1, 2, 31, 32}, 1.2f, 0, 0, true},
  };
}

std::vector<float> BaseLogits(int rows) {
  std::vector<float> b(static_cast<size_t>(rows) * kV);
  for (size_t i = 0; i < b.size(); ++i) b[i] = 3.f * std::sin(0.37f * static_cast<float>(i));
  b[17 + kV] = 9.f;  // an argmax outside most lists
  return b;
}

void ExpectPairsEqual(const std::vector<SampledToken>& out, const std::vector<Case>& cases,
                      uint64_t draw) {
  for (size_t c = 0; c < cases.size(); ++c) {
    const SampledToken& a = out[2 * c];
    const SampledToken& b = out[2 * c + 1];
    ASSERT_EQ(a.token, b.token) << "case " << c << " draw " << draw;
    EXPECT_FLOAT_EQ(a.logprob, b.logprob) << "case " << c;
    ASSERT_EQ(a.num_top, b.num_top);
    for (int k = 0; k < a.num_top; ++k) {
      EXPECT_EQ(a.top_ids[k], b.top_ids[k]);
      EXPECT_FLOAT_EQ(a.top_logprobs[k], b.top_logprobs[k]);
    }
    const auto& ids = cases[c].ids;
    EXPECT_NE(std::find(ids.begin(), ids.end(), b.token), ids.end()) << "case " << c;
    if (cases[c].adjust && ids.size() > 1 && ids[1] != ids[0]) {
      EXPECT_NE(b.token, ids[1]);
    }
  }
}

std::unique_ptr<Backend> Make(DeviceKind kind) {
  auto b = CreateBackend(BackendOptions{kind, 0, 2});
  return b.ok() ? std::move(b).value() : nullptr;
}

TEST(SampleAllowed, CpuSparseRowsSampleAsTheirBitmask) {
  auto be = Make(DeviceKind::kCpu);
  ASSERT_NE(be, nullptr);
  const auto cases = Cases();
  const auto base = BaseLogits(static_cast<int>(cases.size()) + 1);
  for (uint64_t draw = 0; draw < 40; ++draw)
    ExpectPairsEqual(SampleBatch(*be, cases, base, draw), cases, draw);
}

TEST(CudaSampleAllowed, SparseRowsSampleAsTheirBitmaskAndAsTheCpu) {
  auto gpu = Make(DeviceKind::kCuda);
  if (gpu == nullptr) GTEST_SKIP() << "no CUDA backend";
  auto cpu = Make(DeviceKind::kCpu);
  ASSERT_NE(cpu, nullptr);
  const auto cases = Cases();
  const auto base = BaseLogits(static_cast<int>(cases.size()) + 1);
  for (uint64_t draw = 0; draw < 40; ++draw) {
    const auto g = SampleBatch(*gpu, cases, base, draw);
    ExpectPairsEqual(g, cases, draw);
    const auto c = SampleBatch(*cpu, cases, base, draw);
    for (size_t i = 0; i < cases.size(); ++i) {
      if (cases[i].temperature == 0.f) {  // greedy: the same pick on both backends
        EXPECT_EQ(g[2 * i + 1].token, c[2 * i + 1].token) << "case " << i;
        EXPECT_NEAR(g[2 * i + 1].logprob, c[2 * i + 1].logprob, 1e-4);
      }
    }
  }
}

// Masks and allow-lists uploaded beside the forward (StageSampleInputs) sample exactly as the
// ones Sample copies itself; a staged copy of other buffers is not used.
TEST(CudaSampleAllowed, StagedInputsSampleAsUnstaged) {
  for (DeviceKind kind : {DeviceKind::kCpu, DeviceKind::kCuda}) {
    auto be = Make(kind);
    if (be == nullptr) continue;  // (no CUDA device here)
    const auto cases = Cases();
    const auto base = BaseLogits(static_cast<int>(cases.size()) + 1);
    for (uint64_t draw = 0; draw < 20; ++draw) {
      const auto plain = SampleBatch(*be, cases, base, draw);
      for (Stage st : {Stage::kSame, Stage::kOther, Stage::kSame}) {
        const auto staged = SampleBatch(*be, cases, base, draw, st);
        ExpectPairsEqual(staged, cases, draw);
        for (size_t i = 0; i < plain.size(); ++i) {
          EXPECT_EQ(staged[i].token, plain[i].token) << "row " << i << " draw " << draw;
          EXPECT_FLOAT_EQ(staged[i].logprob, plain[i].logprob) << "row " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice
