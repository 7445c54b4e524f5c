// Attention vs the double-precision reference (atol 1e-5 on O(1) outputs), and batch
// invariance: a sequence alone vs inside a batch, duplicates, and thread counts.
#include "backend/cpu/attention.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/cpu/amx.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/reference.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::MakeCpu;
using testing::Random;

struct Shape {
  int heads, kv_heads, dim;
};

// Builds a fused QKV matrix for `lens` and runs attention; returns out [tokens, H*D].
struct AttnRun {
  std::vector<float> qkv, out;
  std::vector<int32_t> cu;
  AttentionParams p;
};

AttnRun Make(const Shape& s, const std::vector<int>& lens, bool causal, int window,
             const std::vector<std::vector<float>>& seq_rows) {
  AttnRun r;
  r.cu = {0};
  for (int l : lens) r.cu.push_back(r.cu.back() + l);
  const int64_t tokens = r.cu.back();
  const int64_t qc = int64_t{s.heads} * s.dim, kc = int64_t{s.kv_heads} * s.dim;
  const int64_t ld = qc + 2 * kc;
  r.qkv.resize(tokens * ld);
  for (size_t i = 0; i < lens.size(); ++i) {
    std::memcpy(r.qkv.data() + r.cu[i] * ld, seq_rows[i].data(), lens[i] * ld * 4);
  }
  r.out.assign(tokens * qc, -1.f);
  Tensor qkv{r.qkv.data(), DType::kF32, tokens, ld, 0};
  r.p.q = qkv.ColSlice(0, qc);
  r.p.k = qkv.ColSlice(qc, kc);
  r.p.v = qkv.ColSlice(qc + kc, kc);
  r.p.out = Tensor{r.out.data(), DType::kF32, tokens, qc, 0};
  r.p.cu_seqlens = r.cu.data();
  r.p.num_seqs = static_cast<int>(lens.size());
  r.p.max_seqlen = lens.empty() ? 0 : *std::max_element(lens.begin(), lens.end());
  r.p.num_heads = s.heads;
  r.p.num_kv_heads = s.kv_heads;
  r.p.head_dim = s.dim;
  r.p.scale = 1.f / std::sqrt(static_cast<float>(s.dim));
  r.p.causal = causal;
  r.p.window = window;
  return r;
}

std::vector<float> SeqRows(const Shape& s, int len, uint32_t seed) {
  const int64_t ld = int64_t{s.heads + 2 * s.kv_heads} * s.dim;
  return Random(len * ld, seed, -2.f, 2.f);
}

TEST(CpuAttention, MatchesReference) {
  auto be = MakeCpu();
  // The single-sequence batch has too few (sequence, head) pairs for 2 threads, so it also
  // exercises the split-into-64-row-tasks path.
  for (const std::vector<int>& lens : {std::vector<int>{1, 7, 65, 130, 3}, std::vector<int>{200}}) {
    for (const Shape& s : {Shape{4, 4, 64}, Shape{4, 2, 128}, Shape{6, 1, 40}, Shape{2, 2, 17}}) {
      std::vector<std::vector<float>> rows;
      for (size_t i = 0; i < lens.size(); ++i) rows.push_back(SeqRows(s, lens[i], 100 + i));
      for (bool causal : {false, true}) {
        for (int window : {0, 1, 5, 64}) {
          AttnRun a = Make(s, lens, causal, window, rows);
          AttnRun b = Make(s, lens, causal, window, rows);
          be->Attention(a.p);
          cpu::ref::Attention(b.p);
          EXPECT_CLOSE(a.out.data(), b.out.data(), a.out.size(), 1e-5, 1e-5)
              << "seqs " << lens.size() << " heads " << s.heads << "/" << s.kv_heads << " dim "
              << s.dim << " causal " << causal << " window " << window;
        }
      }
    }
  }
}

// Large logits, so that most probabilities underflow and the softmax exp sees arguments far
// below -87. Integer q/k/v and a power-of-two scale make every score exact in f32, so the
// comparison measures the softmax and P V alone. head_dim 32 (MiniLM) and 64; lengths that
// leave partial query groups and partial key vectors.
TEST(CpuAttention, MatchesReferenceWideScores) {
  auto be = MakeCpu();
  const std::vector<int> lens = {128, 3, 61, 9};
  for (const Shape& s : {Shape{12, 12, 32}, Shape{2, 1, 64}}) {
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < lens.size(); ++i) {
      const int64_t ld = int64_t{s.heads + 2 * s.kv_heads} * s.dim;
      rows.push_back(Random(lens[i] * ld, 300 + i, -6.f, 6.f));
      for (float& x : rows.back()) x = std::round(x);
    }
    for (bool causal : {false, true}) {
      AttnRun a = Make(s, lens, causal, 0, rows);
      AttnRun b = Make(s, lens, causal, 0, rows);
      a.p.scale = b.p.scale = 0.25f;
      be->Attention(a.p);
      cpu::ref::Attention(b.p);
      EXPECT_CLOSE(a.out.data(), b.out.data(), a.out.size(), 1e-5, 1e-5)
          << "dim " << s.dim << " causal " << causal;
    }
  }
}

// MiniLM-L6 heads (12 x 32): a 128-token sequence alone, in a batch, and on one thread.
TEST(CpuAttention, BatchInvariantHeadDim32) {
  const Shape s{12, 12, 32};
  const int la = 128, lb = 77;
  auto ra = SeqRows(s, la, 7), rb = SeqRows(s, lb, 8);
  const int64_t qc = int64_t{s.heads} * s.dim;
  for (bool causal : {false, true}) {
    auto be2 = MakeCpu(2);
    AttnRun alone = Make(s, {la}, causal, 0, {ra});
    be2->Attention(alone.p);
    AttnRun batch = Make(s, {lb, la, lb}, causal, 0, {rb, ra, rb});
    be2->Attention(batch.p);
    EXPECT_EQ(0, std::memcmp(batch.out.data() + lb * qc, alone.out.data(), la * qc * 4));
    EXPECT_EQ(0, std::memcmp(batch.out.data(), batch.out.data() + (lb + la) * qc, lb * qc * 4));
    auto be1 = MakeCpu(1);
    AttnRun one = Make(s, {lb, la, lb}, causal, 0, {rb, ra, rb});
    be1->Attention(one.p);
    EXPECT_EQ(0, std::memcmp(one.out.data(), batch.out.data(), batch.out.size() * 4));
  }
}

TEST(CpuAttention, BatchInvariantAndDeterministic) {
  const Shape s{4, 2, 64};
  const int la = 200, lb = 37, lc = 129;
  auto ra = SeqRows(s, la, 1), rb = SeqRows(s, lb, 2), rc = SeqRows(s, lc, 3);
  const int64_t qc = int64_t{s.heads} * s.dim;
  for (bool causal : {false, true}) {
    auto be2 = MakeCpu(2);
    AttnRun alone = Make(s, {la}, causal, 0, {ra});
    be2->Attention(alone.p);
    AttnRun batch = Make(s, {lb, la, lc}, causal, 0, {rb, ra, rc});
    be2->Attention(batch.p);
    const float* in_batch = batch.out.data() + lb * qc;
    EXPECT_LE(testing::MaxAbsDiff(in_batch, alone.out.data(), la * qc), 1e-5);
    EXPECT_EQ(0, std::memcmp(in_batch, alone.out.data(), la * qc * 4)) << "not bit-identical";
    AttnRun dup = Make(s, {la, la}, causal, 0, {ra, ra});
    be2->Attention(dup.p);
    EXPECT_EQ(0, std::memcmp(dup.out.data(), dup.out.data() + la * qc, la * qc * 4));
    auto be1 = MakeCpu(1);
    AttnRun one = Make(s, {lb, la, lc}, causal, 0, {rb, ra, rc});
    be1->Attention(one.p);
    EXPECT_EQ(0, std::memcmp(one.out.data(), batch.out.data(), batch.out.size() * 4));
  }
}

// Key limits (AttentionParams::key_lens: ColBERT query expansion tokens that no token
// attends to, PyLate's attend_to_expansion_tokens false). Built without a masked reference:
//  - a token before the limit gets what it gets when the tokens after the limit are absent
//    (the sequence cut at the limit);
//  - a token after the limit (an expansion token) is still computed: it gets what the first
//    token of the cut sequence gets with that token's query in its place (its query over the
//    first key_lens keys).
TEST(CpuAttention, KeyLimitsLeaveTokensOutOfTheKeys) {
  auto be = MakeCpu();
  const std::vector<int> lens = {12, 32, 70, 5, 130};
  const std::vector<int32_t> key_lens = {5, 32, 20, 1, 66};
  for (const Shape& s : {Shape{4, 4, 64}, Shape{6, 1, 40}, Shape{2, 2, 17}}) {
    const int64_t ld = int64_t{s.heads + 2 * s.kv_heads} * s.dim, qc = int64_t{s.heads} * s.dim;
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < lens.size(); ++i) rows.push_back(SeqRows(s, lens[i], 500 + i));
    AttnRun a = Make(s, lens, false, 0, rows);
    a.p.key_lens = key_lens.data();
    be->Attention(a.p);
    // The sequences cut at their limits, and one per expansion token: the cut sequence with
    // that token's query on its first row.
    std::vector<int> cut_lens;
    std::vector<std::vector<float>> cut_rows;
    struct Probe {
      size_t seq;
      int row;
    };
    std::vector<Probe> probes;
    for (size_t i = 0; i < lens.size(); ++i) {
      const int k = key_lens[i];
      cut_lens.push_back(k);
      cut_rows.emplace_back(rows[i].begin(), rows[i].begin() + k * ld);
    }
    for (size_t i = 0; i < lens.size(); ++i) {
      for (int r = key_lens[i]; r < lens[i]; ++r) {
        std::vector<float> x(rows[i].begin(), rows[i].begin() + key_lens[i] * ld);
        std::copy(rows[i].begin() + r * ld, rows[i].begin() + r * ld + qc, x.begin());
        cut_lens.push_back(key_lens[i]);
        cut_rows.push_back(std::move(x));
        probes.push_back({i, r});
      }
    }
    AttnRun cut = Make(s, cut_lens, false, 0, cut_rows);
    be->Attention(cut.p);
    for (size_t i = 0; i < lens.size(); ++i) {
      EXPECT_CLOSE(a.out.data() + a.cu[i] * qc, cut.out.data() + cut.cu[i] * qc, key_lens[i] * qc,
                   1e-6, 1e-6)
          << "dim " << s.dim << " sequence " << i << ": tokens before the limit";
    }
    ASSERT_FALSE(probes.empty());
    for (size_t j = 0; j < probes.size(); ++j) {
      const Probe& pr = probes[j];
      EXPECT_CLOSE(a.out.data() + (a.cu[pr.seq] + pr.row) * qc,
                   cut.out.data() + cut.cu[lens.size() + j] * qc, qc, 1e-6, 1e-6)
          << "dim " << s.dim << " sequence " << pr.seq << " expansion token " << pr.row;
    }
    // And the double-precision reference, causal and windowed too (a window that starts
    // past the limit leaves a row no key: zeros).
    for (bool causal : {false, true}) {
      for (int window : {0, 3, 16}) {
        AttnRun x = Make(s, lens, causal, window, rows);
        AttnRun y = Make(s, lens, causal, window, rows);
        x.p.key_lens = y.p.key_lens = key_lens.data();
        be->Attention(x.p);
        cpu::ref::Attention(y.p);
        EXPECT_CLOSE(x.out.data(), y.out.data(), x.out.size(), 1e-5, 1e-5)
            << "dim " << s.dim << " causal " << causal << " window " << window;
      }
    }
    AttnRun w = Make(s, {70}, false, 3, {rows[2]});
    const int32_t lim = 20;
    w.p.key_lens = &lim;
    be->Attention(w.p);
    for (int r = 23; r < 70; ++r) {  // |r - j| < 3 for no j < 20
      for (int64_t c = 0; c < qc; ++c) ASSERT_EQ(w.out[r * qc + c], 0.f) << "row " << r;
    }
    EXPECT_NE(w.out[21 * qc], 0.f);
  }
}

// --- bf16 products (AttentionParams::products = kBF16; attention_amx.cc) ---

// Where bf16 products run here: AMX tiles (hardware), the same driver with the tiles
// emulated (CPUs with AVX512-BF16 but no AMX, as the development VM), or nowhere (the f32
// kernel runs; then every bf16 result must be the f32 kernel's, bit for bit).
enum class Bf16Here { kAmx, kEmulated, kNone };
Bf16Here Bf16Mode() {
  if (cpu::Features().amx_bf16 && cpu::Features().avx512_bf16 && cpu::amx::Available()) {
    return Bf16Here::kAmx;
  }
  return cpu::RawFeatures().avx512_bf16 ? Bf16Here::kEmulated : Bf16Here::kNone;
}
// Turns the emulation on for a test where there is no AMX.
struct Bf16Scope {
  Bf16Scope() { cpu::SetAttentionAmxEmulationForTesting(Bf16Mode() == Bf16Here::kEmulated); }
  ~Bf16Scope() { cpu::SetAttentionAmxEmulationForTesting(false); }
};

// q, k and v rounded to bf16 (the kernel's first step), for the reference.
std::vector<std::vector<float>> RoundedBf16(std::vector<std::vector<float>> rows) {
  for (auto& r : rows) {
    for (float& x : r) x = BF16ToF32(F32ToBF16(x));
  }
  return rows;
}

// Runs `a` with bf16 products; false (after checking the f32 kernel's bits) where they do
// not run here.
bool RunBf16(Backend* be, AttnRun* a, const Shape& s, const std::vector<int>& lens,
             const std::vector<std::vector<float>>& rows) {
  a->p.products = DType::kBF16;
  be->Attention(a->p);
  AttnRun f = Make(s, lens, a->p.causal, a->p.window, rows);
  be->Attention(f.p);
  const bool same = std::memcmp(f.out.data(), a->out.data(), a->out.size() * 4) == 0;
  // A bf16 result never equals the f32 kernel's on random inputs (unless every row sees a
  // single key), and where bf16 does not run it must.
  const bool one_key = a->p.window == 1 || *std::max_element(lens.begin(), lens.end()) == 1;
  if (Bf16Mode() == Bf16Here::kNone || !one_key) {
    EXPECT_EQ(Bf16Mode() == Bf16Here::kNone, same);
  }
  return Bf16Mode() != Bf16Here::kNone;
}

// Against the double-precision reference on the bf16-rounded q/k/v, the only remaining
// difference is the probabilities' rounding to bf16 (relative error <= 2^-8 each), so an
// output (a convex combination of |v| <= 2) is off by at most 2^-8 * 2 = 7.8e-3: atol 8e-3
// (measured: 3.1e-3). And against the unrounded reference (what a bf16 model gives against
// f32): atol 3e-2 (measured: 1.3e-2). Lengths with partial groups, key blocks and odd pair
// boundaries, head dims 32 (MiniLM), 64 (BERT), 128, 40 and 17 (padded to 64 / 32 columns), GQA and
// MQA, causal and windows (odd windows start key ranges on odd keys).
TEST(CpuAttentionBf16, MatchesReferenceOnRoundedInputs) {
  Bf16Scope scope;
  auto be = MakeCpu();
  for (const std::vector<int>& lens : {std::vector<int>{1, 7, 65, 130, 3}, std::vector<int>{200}}) {
    for (const Shape& s :
         {Shape{12, 12, 32}, Shape{4, 4, 64}, Shape{4, 2, 128}, Shape{6, 1, 40}, Shape{2, 2, 17}}) {
      std::vector<std::vector<float>> rows;
      for (size_t i = 0; i < lens.size(); ++i) rows.push_back(SeqRows(s, lens[i], 700 + i));
      const auto rounded = RoundedBf16(rows);
      for (bool causal : {false, true}) {
        for (int window : {0, 1, 6, 64}) {
          AttnRun a = Make(s, lens, causal, window, rows);
          if (!RunBf16(be.get(), &a, s, lens, rows)) continue;
          AttnRun r = Make(s, lens, causal, window, rounded);
          cpu::ref::Attention(r.p);
          AttnRun x = Make(s, lens, causal, window, rows);
          cpu::ref::Attention(x.p);
          const std::string what = "seqs " + std::to_string(lens.size()) + " heads " +
                                   std::to_string(s.heads) + "/" + std::to_string(s.kv_heads) +
                                   " dim " + std::to_string(s.dim) + " causal " +
                                   std::to_string(causal) + " window " + std::to_string(window);
          EXPECT_LE(testing::MaxAbsDiff(a.out.data(), r.out.data(), a.out.size()), 8e-3) << what;
          EXPECT_LE(testing::MaxAbsDiff(a.out.data(), x.out.data(), a.out.size()), 3e-2) << what;
        }
      }
    }
  }
}

// Alone vs in a batch vs duplicated vs one thread: bit for bit. With window 6 and few
// (sequence, head) pairs the sequence alone is split into 64-row tasks whose key ranges start
// off the 32-key grid (64 - 5 = 59), while in the 5-sequence batch each task is a whole
// sequence: the key chunks must be the same either way.
TEST(CpuAttentionBf16, BatchInvariantAndDeterministic) {
  Bf16Scope scope;
  for (const Shape& s : {Shape{12, 12, 32}, Shape{2, 2, 64}}) {
    const int la = 200, lb = 37, lc = 129;
    auto ra = SeqRows(s, la, 11), rb = SeqRows(s, lb, 12), rc = SeqRows(s, lc, 13);
    const int64_t qc = int64_t{s.heads} * s.dim;
    for (bool causal : {false, true}) {
      for (int window : {0, 6}) {
        auto be2 = MakeCpu(2);
        AttnRun alone = Make(s, {la}, causal, window, {ra});
        if (!RunBf16(be2.get(), &alone, s, {la}, {ra})) continue;
        const std::vector<int> lens = {lb, la, lc, lb, lc};
        const std::vector<std::vector<float>> rows = {rb, ra, rc, rb, rc};
        AttnRun batch = Make(s, lens, causal, window, rows);
        RunBf16(be2.get(), &batch, s, lens, rows);
        const std::string what = "dim " + std::to_string(s.dim) + " causal " +
                                 std::to_string(causal) + " window " + std::to_string(window);
        EXPECT_EQ(0, std::memcmp(batch.out.data() + lb * qc, alone.out.data(), la * qc * 4))
            << what;
        EXPECT_EQ(
            0, std::memcmp(batch.out.data(), batch.out.data() + (lb + la + lc) * qc, lb * qc * 4))
            << what << ": duplicates";
        auto be1 = MakeCpu(1);
        AttnRun one = Make(s, lens, causal, window, rows);
        RunBf16(be1.get(), &one, s, lens, rows);
        EXPECT_EQ(0, std::memcmp(one.out.data(), batch.out.data(), batch.out.size() * 4)) << what;
      }
    }
  }
}

// Shared-prefix reuse (prefix_of): a sequence holding only its own rows after a prefix gets,
// bit for bit, the rows it gets as one full sequence (keys paired on logical positions).
TEST(CpuAttentionBf16, PrefixReuseEqualsTheFullSequence) {
  if (Bf16Mode() == Bf16Here::kNone) GTEST_SKIP() << "no AMX or AVX512-BF16";
  Bf16Scope scope;
  const Shape s{4, 2, 64};
  const int lp = 37, lo = 50;
  auto full_rows = SeqRows(s, lp + lo, 21);
  const int64_t ld = int64_t{s.heads + 2 * s.kv_heads} * s.dim, qc = int64_t{s.heads} * s.dim;
  auto be = MakeCpu();
  AttnRun full = Make(s, {lp + lo}, true, 0, {full_rows});
  full.p.products = DType::kBF16;
  be->Attention(full.p);
  std::vector<float> pre(full_rows.begin(), full_rows.begin() + lp * ld);
  std::vector<float> own(full_rows.begin() + lp * ld, full_rows.end());
  AttnRun split = Make(s, {lp, lo}, true, 0, {pre, own});
  const std::vector<int32_t> prefix_of = {-1, 0};
  split.p.prefix_of = prefix_of.data();
  split.p.products = DType::kBF16;
  be->Attention(split.p);
  EXPECT_EQ(0, std::memcmp(split.out.data(), full.out.data(), (lp + lo) * qc * 4));
}

// Without emulation, bf16 products run only where the CPU has AMX: capped below it, they
// give the f32 kernel's bits; with AMX they differ from them (the test can fail both ways).
TEST(CpuAttentionBf16, RunsOnlyWithAmx) {
  const Shape s{12, 12, 32};
  const std::vector<int> lens = {77, 128};
  const std::vector<std::vector<float>> rows = {SeqRows(s, 77, 31), SeqRows(s, 128, 32)};
  auto be = MakeCpu();
  AttnRun f32 = Make(s, lens, false, 0, rows);
  be->Attention(f32.p);
  AttnRun bf = Make(s, lens, false, 0, rows);
  bf.p.products = DType::kBF16;
  be->Attention(bf.p);
  EXPECT_EQ(Bf16Mode() == Bf16Here::kAmx,
            std::memcmp(f32.out.data(), bf.out.data(), f32.out.size() * 4) != 0);
  cpu::SetMaxIsaForTesting("avx512_bf16");
  AttnRun capped = Make(s, lens, false, 0, rows);
  capped.p.products = DType::kBF16;
  be->Attention(capped.p);
  cpu::SetMaxIsaForTesting("");
  EXPECT_EQ(0, std::memcmp(f32.out.data(), capped.out.data(), f32.out.size() * 4));
}

// On AMX hardware: the tiles against their emulation (the ISA's pseudo-code order: one f32
// rounding per product and per sum). The hardware sums a tile's pairs otherwise (measured on
// the GPU machine's Xeon: 2.8e-4 apart on outputs of |v| <= 2, against bf16's 7.8e-3 bound
// above), so within 1e-3, and reported if not bit for bit.
TEST(CpuAttentionBf16, AmxNearItsEmulation) {
  if (Bf16Mode() != Bf16Here::kAmx) GTEST_SKIP() << "no AMX";
  auto be = MakeCpu();
  for (const Shape& s : {Shape{12, 12, 32}, Shape{4, 2, 64}, Shape{2, 2, 128}}) {
    const std::vector<int> lens = {141, 7, 64};
    std::vector<std::vector<float>> rows;
    for (size_t i = 0; i < lens.size(); ++i) rows.push_back(SeqRows(s, lens[i], 900 + i));
    AttnRun hw = Make(s, lens, false, 0, rows);
    hw.p.products = DType::kBF16;
    be->Attention(hw.p);
    cpu::SetAttentionAmxEmulationForTesting(true);
    AttnRun emu = Make(s, lens, false, 0, rows);
    emu.p.products = DType::kBF16;
    be->Attention(emu.p);
    cpu::SetAttentionAmxEmulationForTesting(false);
    EXPECT_LE(testing::MaxAbsDiff(hw.out.data(), emu.out.data(), hw.out.size()), 1e-3);
    const bool same = std::memcmp(hw.out.data(), emu.out.data(), hw.out.size() * 4) == 0;
    std::printf("dim %d: AMX %s its emulation\n", s.dim, same ? "bit for bit" : "near");
  }
}

// SLUICE_CPU_ATTENTION=f32 keeps bf16 products in f32 (the f32 kernel's bits), "auto" does
// not, and any other value is refused when a CPU backend is created.
TEST(CpuAttentionBf16, EnvironmentForcesF32OrIsRefused) {
  if (Bf16Mode() == Bf16Here::kNone) GTEST_SKIP() << "no AMX or AVX512-BF16";
  Bf16Scope scope;
  const Shape s{12, 12, 32};
  const std::vector<int> lens = {77, 128};
  const std::vector<std::vector<float>> rows = {SeqRows(s, 77, 41), SeqRows(s, 128, 42)};
  auto be = MakeCpu();
  AttnRun f32 = Make(s, lens, false, 0, rows);
  be->Attention(f32.p);
  auto run_bf16 = [&] {
    AttnRun r = Make(s, lens, false, 0, rows);
    r.p.products = DType::kBF16;
    be->Attention(r.p);
    return std::memcmp(f32.out.data(), r.out.data(), f32.out.size() * 4) == 0;
  };
  setenv("SLUICE_CPU_ATTENTION", "f32", 1);
  EXPECT_TRUE(run_bf16());
  EXPECT_TRUE(CreateBackend(BackendOptions{}).ok());
  setenv("SLUICE_CPU_ATTENTION", "auto", 1);
  EXPECT_FALSE(run_bf16());
  setenv("SLUICE_CPU_ATTENTION", "bf16", 1);
  auto refused = CreateBackend(BackendOptions{});
  unsetenv("SLUICE_CPU_ATTENTION");
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("SLUICE_CPU_ATTENTION=bf16"), std::string::npos)
      << refused.status().message();
  EXPECT_FALSE(run_bf16());
}

// bf16 activations (q/k/v/out in bf16: Backend::InnerActivationDType) give, bit for bit, the
// result of the same kernel on the widened values, rounded once to bf16: on AMX (or its
// emulation) the bf16-product driver, where it does not run (and with SLUICE_CPU_ATTENTION=
// f32) the f32 kernel. Padded head dims, GQA, causal, windows and key limits (rows that see
// no key get zeros).
TEST(CpuAttentionBf16, Bf16ActivationsAreTheF32PathRounded) {
  Bf16Scope scope;
  auto be = MakeCpu();
  for (const char* mode : {"auto", "f32"}) {
    setenv("SLUICE_CPU_ATTENTION", mode, 1);
    for (const Shape& s : {Shape{12, 12, 32}, Shape{4, 2, 64}, Shape{6, 1, 40}}) {
      const std::vector<int> lens = {1, 70, 130, 33};
      const std::vector<int32_t> key_lens = {1, 60, 130, 2};
      std::vector<std::vector<float>> rows;
      for (size_t i = 0; i < lens.size(); ++i) rows.push_back(SeqRows(s, lens[i], 800 + i));
      rows = RoundedBf16(rows);
      for (bool causal : {false, true}) {
        for (int window : {0, 6}) {
          for (bool limits : {false, true}) {
            AttnRun f = Make(s, lens, causal, window, rows);
            f.p.products = std::string(mode) == "f32" ? DType::kF32 : DType::kBF16;
            if (limits) f.p.key_lens = key_lens.data();
            be->Attention(f.p);
            AttnRun h = Make(s, lens, causal, window, rows);
            std::vector<uint16_t> qkv16(h.qkv.size()), out16(h.out.size(), 0xFFFF);
            for (size_t i = 0; i < qkv16.size(); ++i) qkv16[i] = F32ToBF16(h.qkv[i]);
            const int64_t qc = h.p.q.cols, kc = h.p.k.cols;
            Tensor t{qkv16.data(), DType::kBF16, h.p.q.rows, qc + 2 * kc, 0};
            h.p.q = t.ColSlice(0, qc);
            h.p.k = t.ColSlice(qc, kc);
            h.p.v = t.ColSlice(qc + kc, kc);
            h.p.out = Tensor{out16.data(), DType::kBF16, h.p.out.rows, qc, 0};
            if (limits) h.p.key_lens = key_lens.data();
            be->Attention(h.p);
            std::vector<uint16_t> want(f.out.size());
            for (size_t i = 0; i < want.size(); ++i) want[i] = F32ToBF16(f.out[i]);
            EXPECT_EQ(want, out16) << "mode " << mode << " dim " << s.dim << " causal " << causal
                                   << " window " << window << " limits " << limits;
          }
        }
      }
    }
  }
  unsetenv("SLUICE_CPU_ATTENTION");
}

// Generation's paged KV cache keeps f32 attention even for bf16 models (not measured with
// tiles): bf16 products there give the f32 kernel's bits, with emulation on or AMX present.
TEST(CpuAttentionBf16, PagedCacheStaysF32) {
  Bf16Scope scope;
  const int kBlock = 16, H = 4, D = 64, len = 40;
  const std::vector<int32_t> table = {3, 1, 2}, start = {0}, cu = {0, len};
  const auto q = Random(static_cast<size_t>(len) * H * D, 71, -1.f, 1.f);
  auto kc = Random(static_cast<size_t>(4 * kBlock) * H * D, 72, -1.f, 1.f);
  auto vc = Random(static_cast<size_t>(4 * kBlock) * H * D, 73, -1.f, 1.f);
  auto be = MakeCpu();
  auto run = [&](DType products) {
    std::vector<float> qq = q, out(static_cast<size_t>(len) * H * D, 0.f);
    AttentionParams p;
    p.q = Tensor{qq.data(), DType::kF32, len, H * D, 0};
    p.k = Tensor{kc.data(), DType::kF32, 4 * kBlock, H * D, 0};
    p.v = Tensor{vc.data(), DType::kF32, 4 * kBlock, H * D, 0};
    p.out = Tensor{out.data(), DType::kF32, len, H * D, 0};
    p.cu_seqlens = cu.data();
    p.kv_block_table = table.data();
    p.kv_start = start.data();
    p.num_seqs = 1;
    p.max_seqlen = len;
    p.num_heads = p.num_kv_heads = H;
    p.head_dim = D;
    p.scale = 0.125f;
    p.causal = true;
    p.kv_blocks_per_seq = 3;
    p.kv_block_size = kBlock;
    p.max_context = len;
    p.products = products;
    be->Attention(p);
    return out;
  };
  const auto f32 = run(DType::kF32), bf16 = run(DType::kBF16);
  EXPECT_EQ(0, std::memcmp(f32.data(), bf16.data(), f32.size() * 4));
}

}  // namespace
}  // namespace sluice
