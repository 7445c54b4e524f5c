// Batch invariance on CUDA (BackendOptions::batch_invariant): a row's result is the same, bit
// for bit, whatever the rows computed with it. GEMMs (plain, bias, residual, the LM head's
// shape) for M from 1 to 1,500 rows, the decode blocks (RMSNorm + GEMM + SiLU gate) for
// M = 1..300, and paged attention: a query row decoded alone (one query per sequence, next
// to other sequences) equals the same row computed inside a prefill chunk of any size.
// Without the option these differ in the last bits (split-K decode attention, the GEMV kernel,
// per-bucket GEMM algorithms); the test prints how far the default backend is off.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "compare.h"

namespace sluice {
namespace {

using cuda_test::Random;

struct Gpu {
  std::unique_ptr<Backend> be;
  std::vector<Buffer> keep;
  Tensor Make(const std::vector<float>& v, int64_t rows, int64_t cols, DType dt) {
    HostTensor h{v.data(), DType::kF32, {rows, cols}, "t"};
    auto b = be->Upload(h, dt);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    keep.push_back(std::move(b).value());
    return keep.back().t();
  }
  Tensor I32(const std::vector<int32_t>& v) {
    keep.push_back(be->Allocate(DType::kI32, 1, static_cast<int64_t>(v.size())));
    be->CopyFromHost(v.data(), keep.back().t());
    return keep.back().t();
  }
  std::vector<float> Get(const Tensor& t) {
    std::vector<float> out(t.numel());
    be->CopyToHostF32(t, out.data());
    return out;
  }
  void Clear() { keep.clear(); }
};

std::unique_ptr<Backend> MakeCuda(bool invariant) {
  BackendOptions o{DeviceKind::kCuda, 0, 0};
  o.batch_invariant = invariant;
  auto g = CreateBackend(o);
  return g.ok() ? std::move(g).value() : nullptr;
}

// Rows [0, m) of `got` ([m, n]) that differ bitwise from the same rows of `ref`.
int DifferingRows(const std::vector<float>& got, const std::vector<float>& ref, int64_t m,
                  int64_t n) {
  int bad = 0;
  for (int64_t r = 0; r < m; ++r) {
    bad += std::memcmp(got.data() + r * n, ref.data() + r * n, sizeof(float) * n) != 0;
  }
  return bad;
}

class CudaBatchInvariant : public ::testing::Test {
 protected:
  void SetUp() override {
    inv_.be = MakeCuda(true);
    if (!inv_.be) GTEST_SKIP() << "no CUDA device";
    def_.be = MakeCuda(false);
    ASSERT_NE(def_.be, nullptr);
    ASSERT_NE(inv_.be->Describe().find("batch invariant"), std::string::npos);
  }
  Gpu inv_, def_;
};

TEST_F(CudaBatchInvariant, LinearRowsIndependentOfM) {
  struct Shape {
    int64_t k, n, max_m;
  };
  const Shape shapes[] = {
      {64, 96, 1500}, {1024, 3072, 1500}, {3072, 1024, 1500}, {1024, 151936, 300}};
  const int64_t ms[] = {1, 2, 3, 4, 5, 8, 16, 17, 64, 100, 256, 300, 1024, 1500};
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (const Shape& s : shapes) {
      const auto w = Random(s.n * s.k, 1, -0.05f, 0.05f), b = Random(s.n, 2);
      const auto x = Random(s.max_m * s.k, 3, -1.f, 1.f);
      const auto res = Random(s.max_m * s.n, 4);
      HostTensor hw{w.data(), DType::kF32, {s.n, s.k}, "w"};
      HostTensor hb{b.data(), DType::kF32, {s.n}, "b"};
      // 0: plain, f32 out (the LM head); 1: bias, activation-dtype out; 2: residual in place.
      for (int variant = 0; variant < 3; ++variant) {
        if (s.n > 100000 && variant > 0) continue;
        const DType odt = variant == 0 ? DType::kF32 : dt;
        for (Gpu* g : {&inv_, &def_}) {
          auto lw = g->be->PrepareLinear(hw, variant == 1 ? &hb : nullptr, dt);
          ASSERT_TRUE(lw.ok());
          std::vector<float> ref;
          int worst = 0;
          {
            Tensor tx = g->Make(x, s.max_m, s.k, dt), out = g->Make(res, s.max_m, s.n, odt);
            g->be->Linear({lw->get(), tx, out, Activation::kNone, variant == 2 ? &out : nullptr});
            ref = g->Get(out);
            g->Clear();
          }
          for (int64_t m : ms) {
            if (m > s.max_m) continue;
            std::vector<float> xm(x.begin(), x.begin() + m * s.k);
            std::vector<float> rm(res.begin(), res.begin() + m * s.n);
            Tensor tx = g->Make(xm, m, s.k, dt), out = g->Make(rm, m, s.n, odt);
            g->be->Linear({lw->get(), tx, out, Activation::kNone, variant == 2 ? &out : nullptr});
            const int bad = DifferingRows(g->Get(out), ref, m, s.n);
            worst = std::max(worst, bad);
            if (g == &inv_) {
              EXPECT_EQ(bad, 0) << DTypeName(dt) << " " << m << " x " << s.k << " x " << s.n
                                << " variant " << variant;
            }
            g->Clear();
          }
          if (g == &def_) {
            std::printf("[ default  ] %s %lld x %lld variant %d: up to %d rows differ\n",
                        DTypeName(dt), static_cast<long long>(s.k), static_cast<long long>(s.n),
                        variant, worst);
          }
        }
      }
    }
  }
}

// A decoder's fused blocks (LinearBlock: RMSNorm prologue, GEMM, SiLU-gated epilogue,
// residual): decode-sized M (the GEMV kernel by default) equals the rows of a prefill-sized M.
TEST_F(CudaBatchInvariant, LinearBlockRowsIndependentOfM) {
  const int64_t k = 1024, n = 2 * 3072, max_m = 300;
  const auto w = Random(n * k, 11, -0.05f, 0.05f), nw = Random(k, 12, 0.5f, 1.5f);
  const auto x = Random(max_m * k, 13, -1.f, 1.f);
  HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
  for (Gpu* g : {&inv_, &def_}) {
    auto lw = g->be->PrepareLinear(hw, nullptr, DType::kBF16);
    ASSERT_TRUE(lw.ok());
    Tensor tnw = g->Make(nw, 1, k, DType::kF32);
    auto run = [&](int64_t m) {
      std::vector<float> xm(x.begin(), x.begin() + m * k);
      LinearBlockParams p;
      p.weight = lw->get();
      p.x = g->Make(xm, m, k, DType::kBF16);
      p.out = g->Make(std::vector<float>(m * n / 2, 0.f), m, n / 2, DType::kBF16);
      p.norm_weight = &tnw;
      p.normed = g->Make(std::vector<float>(m * k, 0.f), m, k, DType::kBF16);
      p.gate = Activation::kSilu;
      p.gate_up = g->Make(std::vector<float>(m * n, 0.f), m, n, DType::kBF16);
      g->be->LinearBlock(p);
      return g->Get(p.out);
    };
    const auto ref = run(max_m);
    int worst = 0;
    for (int64_t m : {1, 2, 3, 4, 5, 16, 64, 300}) {
      const int bad = DifferingRows(run(m), ref, m, n / 2);
      worst = std::max(worst, bad);
      if (g == &inv_) {
        EXPECT_EQ(bad, 0) << "M " << m;
      }
    }
    if (g == &def_) std::printf("[ default  ] LinearBlock: up to %d rows differ\n", worst);
  }
}

// Paged attention of one sequence with 300 cached keys: its rows computed (a) in one prefill
// chunk of all 300 queries, (b) in a chunk of the last 100, (c) the last row decoded alone
// among other sequences (one query each). With the option (b) and (c) equal (a) bit for bit.
TEST_F(CudaBatchInvariant, PagedAttentionDecodeEqualsPrefillRows) {
  constexpr int kBlock = 16, L = 300, Hkv = 2;
  const int other[] = {37, 129, 1};  // contexts of the sequences decoded next to it
  int blocks_needed = (L + kBlock - 1) / kBlock;
  for (int c : other) blocks_needed += (c + kBlock - 1) / kBlock;
  const int total_blocks = blocks_needed + 1, bps = (L + kBlock - 1) / kBlock;
  std::vector<int32_t> order(total_blocks - 1);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i + 1);
  std::shuffle(order.begin(), order.end(), std::mt19937(3));
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (int G : {1, 2, 4}) {
      for (int D : {32, 64, 128}) {
        const int Hq = G * Hkv;
        const auto q = Random(static_cast<size_t>(L) * Hq * D, 20 + G, -1.f, 1.f);
        const auto kc = Random(static_cast<size_t>(total_blocks) * kBlock * Hkv * D, 21, -1.f, 1.f);
        const auto vc = Random(static_cast<size_t>(total_blocks) * kBlock * Hkv * D, 22, -1.f, 1.f);
        for (Gpu* g : {&inv_, &def_}) {
          Tensor kt = g->Make(kc, static_cast<int64_t>(total_blocks) * kBlock, Hkv * D, dt);
          Tensor vt = g->Make(vc, static_cast<int64_t>(total_blocks) * kBlock, Hkv * D, dt);
          // Sequence 0 (the one compared) then the others, blocks from the shuffled order.
          std::vector<int32_t> table(4 * bps, 0);
          size_t next = 0;
          const int ctx[] = {L, other[0], other[1], other[2]};
          for (int s = 0; s < 4; ++s) {
            for (int b = 0; b < (ctx[s] + kBlock - 1) / kBlock; ++b)
              table[s * bps + b] = order[next++];
          }
          // Rows [first, L) of sequence 0 as one chunk, plus (decode) the other sequences'
          // last rows when `decode`.
          auto run = [&](int first, bool decode) {
            const int own = L - first, seqs = decode ? 4 : 1;
            std::vector<float> qr(q.begin() + static_cast<size_t>(first) * Hq * D, q.end());
            std::vector<int32_t> cu = {0, own}, start = {first};
            if (decode) {
              for (int s = 1; s < 4; ++s) {
                for (int j = 0; j < Hq * D; ++j) qr.push_back(q[(s * 7 % L) * Hq * D + j]);
                cu.push_back(cu.back() + 1);
                start.push_back(ctx[s] - 1);
              }
            }
            const int rows = static_cast<int>(cu.back());
            AttentionParams p;
            p.q = g->Make(qr, rows, Hq * D, dt);
            p.k = kt;
            p.v = vt;
            p.out = g->Make(std::vector<float>(static_cast<size_t>(rows) * Hq * D, 0.f), rows,
                            Hq * D, dt);
            p.cu_seqlens = g->I32(cu).ptr<int32_t>();
            p.kv_block_table = g->I32(table).ptr<int32_t>();
            p.kv_start = g->I32(start).ptr<int32_t>();
            p.num_seqs = seqs;
            p.max_seqlen = own;
            p.num_heads = Hq;
            p.num_kv_heads = Hkv;
            p.head_dim = D;
            p.scale = 1.f / std::sqrt(static_cast<float>(D));
            p.causal = true;
            p.kv_blocks_per_seq = bps;
            p.kv_block_size = kBlock;
            p.max_context = L;
            g->be->Attention(p);
            auto out = g->Get(p.out);
            out.resize(static_cast<size_t>(own) * Hq * D);  // sequence 0's rows
            return out;
          };
          const auto all = run(0, false);
          const auto tail = run(200, false);
          const auto dec = run(L - 1, true);
          const size_t w = static_cast<size_t>(Hq) * D;
          const std::vector<float> all_tail(all.begin() + 200 * w, all.end());
          const std::vector<float> all_last(all.end() - w, all.end());
          const int bad_chunk = DifferingRows(tail, all_tail, L - 200, static_cast<int64_t>(w));
          const int bad_dec = DifferingRows(dec, all_last, 1, static_cast<int64_t>(w));
          if (g == &inv_) {
            EXPECT_EQ(bad_chunk, 0) << DTypeName(dt) << " G " << G << " D " << D;
            EXPECT_EQ(bad_dec, 0) << DTypeName(dt) << " G " << G << " D " << D;
          } else {
            std::printf(
                "[ default  ] attention %s G %d D %d: chunk rows differing %d, decode "
                "row differs %d (max |diff| %.3g)\n",
                DTypeName(dt), G, D, bad_chunk, bad_dec, cuda_test::MaxAbs(dec, all_last));
          }
          g->Clear();
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice
