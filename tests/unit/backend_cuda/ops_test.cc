// Backend-ops test: every CUDA backend operation against the CPU backend on random inputs
// (odd sizes, strided views, each dtype). Skipped when no CUDA device is present (CI
// builds it wherever nvcc exists and skips it there).
//
// Tolerances (max |a - b| <= atol + rtol * |b|, b = CPU):
//   element-wise, norms, RoPE, pooling (f32)  atol 1e-5, rtol 1e-5
//   gathers, copies, CLS/LAST/MAX pooling     exact
//   attention (f32, different reduction order)  atol 2e-5, rtol 1e-4
//   Linear f32 (no TF32)                     atol 1e-4, rtol 1e-4 (K <= 1024)
//   Linear bf16 vs CPU bf16 (same rounding of W and x, fp32 accumulation)  atol 2e-4, rtol 2e-4
//   Linear f16 vs CPU f32 on f16-rounded W and x                           atol 2e-4, rtol 2e-4
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "compare.h"

namespace sluice {
namespace {

using cuda_test::MaxAbs;
using cuda_test::Random;
using cuda_test::Rounded;

// One backend plus helpers to move host vectors in and out.
struct Dev {
  std::unique_ptr<Backend> be;
  std::vector<Buffer> keep;
  Tensor F32(const std::vector<float>& v, int64_t rows, int64_t cols) {
    keep.push_back(be->Allocate(DType::kF32, rows, cols));
    be->CopyFromHost(v.data(), keep.back().t());
    return keep.back().t();
  }
  Tensor I32(const std::vector<int32_t>& v) {
    keep.push_back(be->Allocate(DType::kI32, 1, static_cast<int64_t>(v.size())));
    be->CopyFromHost(v.data(), keep.back().t());
    return keep.back().t();
  }
  Tensor Table(const std::vector<float>& v, int64_t rows, int64_t cols, DType dt) {
    HostTensor h{v.data(), DType::kF32, {rows, cols}, "table"};
    auto b = be->Upload(h, dt);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    keep.push_back(std::move(b).value());
    return keep.back().t();
  }
  std::vector<float> Get(const Tensor& t) {
    std::vector<float> out(t.numel());
    be->CopyToHostF32(t, out.data());
    return out;
  }
};

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = CreateBackend(BackendOptions{DeviceKind::kCuda, 0, 0});
    if (!g.ok()) GTEST_SKIP() << "no CUDA backend: " << g.status().ToString();
    gpu_.be = std::move(g).value();
    auto c = CreateBackend(BackendOptions{DeviceKind::kCpu, 0, 2});
    ASSERT_TRUE(c.ok());
    cpu_.be = std::move(c).value();
  }
  // Runs fn on both backends; returns {gpu, cpu} outputs.
  template <typename Fn>
  std::pair<std::vector<float>, std::vector<float>> Both(Fn fn) {
    auto a = fn(gpu_);
    auto b = fn(cpu_);
    return {a, b};
  }
  Dev gpu_, cpu_;
};

constexpr int64_t kRows[] = {1, 3, 17, 130};
constexpr int64_t kCols[] = {7, 64, 100, 385};
constexpr Activation kActs[] = {Activation::kNone, Activation::kGeluErf, Activation::kGeluTanh,
                                Activation::kSilu, Activation::kRelu,    Activation::kQuickGelu};

TEST_F(CudaOps, Describe) {
  EXPECT_EQ(gpu_.be->kind(), DeviceKind::kCuda);
  std::printf("[ device ] %s\n", gpu_.be->Describe().c_str());
}

TEST_F(CudaOps, UploadAndCopies) {
  const auto v = Random(37 * 53, 1, -3.f, 3.f);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    auto [g, c] = Both([&](Dev& d) {
      Tensor t = d.Table(v, 37, 53, dt == DType::kF16 ? DType::kF32 : dt);
      if (dt == DType::kF16 && d.be->kind() == DeviceKind::kCuda) t = d.Table(v, 37, 53, dt);
      return d.Get(t.ColSlice(5, 40));
    });
    if (dt == DType::kF16) {
      EXPECT_NEAR_ALL(g, c, 1e-6, 1.0 / 1024);  // f16 rounding of the CPU's f32 copy
    } else {
      EXPECT_EQ(g, c) << DTypeName(dt);
    }
  }
  // Strided CopyFromHost into a column block.
  auto [g, c] = Both([&](Dev& d) {
    Tensor wide = d.F32(std::vector<float>(9 * 20, 0.f), 9, 20);
    std::vector<float> blk = Random(9 * 6, 2);
    d.be->CopyFromHost(blk.data(), wide.ColSlice(11, 6));
    return d.Get(wide);
  });
  EXPECT_EQ(g, c);
}

TEST_F(CudaOps, ElementWise) {
  for (auto act : kActs) {
    for (int64_t rows : kRows) {
      for (int64_t cols : kCols) {
        const int64_t ld = cols + 3;
        auto x = Random(rows * ld, 3, -8.f, 8.f);
        auto [g, c] = Both([&](Dev& d) {
          Tensor t = d.F32(x, rows, ld);
          d.be->Activate(t.ColSlice(1, cols), act);
          return d.Get(t);
        });
        EXPECT_NEAR_ALL(g, c, 1e-5, 1e-5) << "act " << int(act) << " " << rows << "x" << cols;
        auto gu = Random(rows * 2 * cols, 4, -6.f, 6.f);
        auto [g2, c2] = Both([&](Dev& d) {
          Tensor in = d.F32(gu, rows, 2 * cols);
          Tensor out = d.F32(std::vector<float>(rows * cols), rows, cols);
          d.be->GatedActivate(in, act, out);
          return d.Get(out);
        });
        EXPECT_NEAR_ALL(g2, c2, 1e-5, 1e-5) << "gated " << int(act);
      }
    }
  }
  auto a = Random(17 * 100, 5), b = Random(17 * 100, 6);
  auto [g, c] = Both([&](Dev& d) {
    Tensor ta = d.F32(a, 17, 100), tb = d.F32(b, 17, 100);
    d.be->Add(ta, tb, ta);  // aliasing a
    return d.Get(ta);
  });
  EXPECT_EQ(g, c);
}

TEST_F(CudaOps, Norms) {
  for (int64_t rows : kRows) {
    for (int64_t cols : {7, 64, 385, 1024, 4099}) {
      auto x = Random(rows * cols, 7, -3.f, 3.f), r = Random(rows * cols, 8);
      auto gm = Random(cols, 9, 0.5f, 1.5f), bt = Random(cols, 10);
      for (int variant = 0; variant < 4; ++variant) {
        const bool res = variant & 1, beta = variant & 2;
        auto [g, c] = Both([&](Dev& d) {
          Tensor tx = d.F32(x, rows, cols), tr = d.F32(r, rows, cols);
          Tensor tg = d.F32(gm, 1, cols), tb = d.F32(bt, 1, cols);
          d.be->LayerNorm(tx, res ? &tr : nullptr, tg, beta ? &tb : nullptr, 1e-5f, tx);
          return d.Get(tx);
        });
        EXPECT_NEAR_ALL(g, c, 1e-5, 1e-5) << "layernorm " << rows << "x" << cols << " v" << variant;
        auto [g2, c2] = Both([&](Dev& d) {
          Tensor tx = d.F32(x, rows, cols), tr = d.F32(r, rows, cols), tg = d.F32(gm, 1, cols);
          Tensor out = d.F32(std::vector<float>(rows * cols), rows, cols);
          if (res) {
            d.be->RmsNorm(tx, &tr, tg, 1e-6f, out);
            auto o = d.Get(out), s = d.Get(tx);
            o.insert(o.end(), s.begin(), s.end());  // residual stream updated too
            return o;
          }
          d.be->RmsNorm(tx, nullptr, tg, 1e-6f, tx);  // in place
          return d.Get(tx);
        });
        EXPECT_NEAR_ALL(g2, c2, 1e-5, 1e-5) << "rmsnorm " << rows << "x" << cols;
      }
    }
  }
  // Grouped (per-head QK-norm) on a column block of a wider matrix, in place.
  for (int group : {32, 64, 128}) {
    const int heads = 3, width = 2 * heads * group + 5;
    auto x = Random(19 * width, 11, -4.f, 4.f), w = Random(group, 12, 0.5f, 1.5f);
    auto [g, c] = Both([&](Dev& d) {
      Tensor t = d.F32(x, 19, width), tw = d.F32(w, 1, group);
      Tensor q = t.ColSlice(group, heads * group);
      d.be->RmsNorm(q, nullptr, tw, 1e-6f, q, group);
      return d.Get(t);
    });
    EXPECT_NEAR_ALL(g, c, 1e-5, 1e-5) << "group " << group;
  }
}

TEST_F(CudaOps, Rope) {
  for (auto style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
    for (int dim : {32, 64, 128}) {
      for (int rot : {dim, dim / 2}) {
        for (double theta : {10000.0, 1000000.0}) {
          const int heads = 3, T = 41, width = heads * dim + 2 * dim;
          auto x = Random(T * width, 13, -2.f, 2.f);
          std::vector<int32_t> pos(T);
          for (int t = 0; t < T; ++t) pos[t] = (t * 97) % 5000;
          auto [g, c] = Both([&](Dev& d) {
            Tensor tx = d.F32(x, T, width), tp = d.I32(pos);
            d.be->Rope(cuda_test::RopeOf(tx.ColSlice(dim, heads * dim), tp, heads, dim, rot, theta,
                                         style));
            return d.Get(tx);
          });
          EXPECT_NEAR_ALL(g, c, 1e-5, 1e-5)
              << "style " << int(style) << " dim " << dim << " rot " << rot << " theta " << theta;
        }
      }
    }
  }
}

// The 16-byte neox path (aligned half rows) against the element-wise kernel (the same rows
// one element off 16-byte alignment), bf16 and f16, with the cos/sin table and without:
// the same arithmetic per element, so the same bits.
TEST_F(CudaOps, RopeVectorisedMatchesElementwise) {
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int dim : {32, 64, 128}) {
      for (int max_position : {0, 6000}) {
        const int heads = 5, T = 37, width = heads * dim + 16;
        auto x = Random(T * width, 21, -2.f, 2.f);
        std::vector<int32_t> pos(T);
        for (int t = 0; t < T; ++t) pos[t] = (t * 131) % 5000;
        std::vector<float> got[2];
        for (int off : {0, 1}) {  // 0: 16-byte aligned (vectorised); 1: element-wise
          std::vector<float> shifted(T * width, 0.f);
          for (int t = 0; t < T; ++t) {
            for (int c = 0; c < heads * dim; ++c) shifted[t * width + off + c] = x[t * width + c];
          }
          Tensor tx = gpu_.Table(shifted, T, width, dt), tp = gpu_.I32(pos);
          gpu_.be->Rope(cuda_test::RopeOf(tx.ColSlice(off, heads * dim), tp, heads, dim, dim,
                                          160000.0, RopeStyle::kNeox, max_position));
          auto all = gpu_.Get(tx);
          for (int t = 0; t < T; ++t) {
            got[off].insert(got[off].end(), all.begin() + t * width + off,
                            all.begin() + t * width + off + heads * dim);
          }
        }
        EXPECT_EQ(got[0], got[1]) << DTypeName(dt) << " dim " << dim << " table " << max_position;
      }
    }
  }
}

TEST_F(CudaOps, GathersAndPooling) {
  const int64_t V = 211, H = 67;
  auto table = Random(V * H, 14);
  std::vector<int32_t> ids = {0, 5, 210, 5, 17, 99, 3};
  for (DType dt : {DType::kF32, DType::kBF16}) {
    auto [g, c] = Both([&](Dev& d) {
      Tensor tt = d.Table(table, V, H, dt), ti = d.I32(ids);
      Tensor out = d.F32(Random(ids.size() * H, 15), static_cast<int64_t>(ids.size()), H);
      d.be->EmbeddingGather(tt, ti.ptr<int32_t>(), static_cast<int64_t>(ids.size()), out, true);
      auto a = d.Get(out);
      d.be->EmbeddingGather(tt, ti.ptr<int32_t>(), static_cast<int64_t>(ids.size()), out, false);
      auto b = d.Get(out);
      a.insert(a.end(), b.begin(), b.end());
      return a;
    });
    EXPECT_EQ(g, c) << DTypeName(dt);
  }
  {  // f16 table (the CPU backend stores no f16): against the host-rounded values.
    gpu_.keep.clear();
    Tensor tt = gpu_.Table(table, V, H, DType::kF16), ti = gpu_.I32(ids);
    Tensor out = gpu_.F32(std::vector<float>(ids.size() * H), static_cast<int64_t>(ids.size()), H);
    gpu_.be->EmbeddingGather(tt, ti.ptr<int32_t>(), static_cast<int64_t>(ids.size()), out, false);
    auto got = gpu_.Get(out);
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t c = 0; c < H; ++c) {
        ASSERT_EQ(got[i * H + c], F16ToF32(F32ToF16(table[ids[i] * H + c])));
      }
    }
  }
  auto [g, c] = Both([&](Dev& d) {
    Tensor tx = d.F32(table, V, H), ti = d.I32(ids);
    Tensor out = d.F32(std::vector<float>(ids.size() * H), static_cast<int64_t>(ids.size()), H);
    d.be->GatherRows(tx.ColSlice(3, 50), ti.ptr<int32_t>(), static_cast<int64_t>(ids.size()),
                     out.ColSlice(0, 50));
    return d.Get(out);
  });
  EXPECT_EQ(g, c);
  const std::vector<int32_t> cu = {0, 1, 8, 8 + 33, 8 + 33 + 150};
  auto hidden = Random(cu.back() * H, 16, -5.f, 5.f);
  for (auto mode : {PoolMode::kCls, PoolMode::kMean, PoolMode::kLast, PoolMode::kMax}) {
    auto [g2, c2] = Both([&](Dev& d) {
      PoolParams p;
      p.hidden = d.F32(hidden, cu.back(), H);
      p.out = d.F32(std::vector<float>(4 * H), 4, H);
      p.cu_seqlens = d.I32(cu).ptr<int32_t>();
      p.num_seqs = 4;
      p.mode = mode;
      d.be->Pool(p);
      return d.Get(p.out);
    });
    if (mode == PoolMode::kMean) {
      EXPECT_NEAR_ALL(g2, c2, 1e-5, 1e-5);
    } else {
      EXPECT_EQ(g2, c2) << "pool mode " << int(mode);
    }
  }
}

using cuda_test::AttnCase;
using cuda_test::AttnParams;

TEST_F(CudaOps, Attention) {
  const std::vector<int32_t> lens = {1, 7, 33, 100, 257, 2};
  std::vector<int32_t> cu = {0};
  for (int l : lens) cu.push_back(cu.back() + l);
  const int T = cu.back();
  const AttnCase cases[] = {{4, 4, 64, false, 0},  {4, 4, 64, true, 0},   {8, 2, 128, true, 0},
                            {6, 3, 32, false, 0},  {2, 1, 80, true, 0},   {2, 2, 256, false, 0},
                            {4, 2, 64, false, 16}, {4, 4, 128, true, 40}, {3, 1, 48, false, 0},
                            {3, 1, 30, true, 0},   {2, 2, 30, false, 5},  {4, 2, 36, false, 0},
                            {2, 1, 130, true, 3}};
  for (const auto& ac : cases) {
    const int qw = ac.heads * ac.dim, kw = ac.kv_heads * ac.dim, width = qw + 2 * kw;
    auto qkv = Random(static_cast<size_t>(T) * width, 17 + ac.dim, -2.f, 2.f);
    auto [g, c] = Both([&](Dev& d) {
      Tensor t = d.F32(qkv, T, width);
      AttentionParams p =
          AttnParams(t, d.F32(std::vector<float>(static_cast<size_t>(T) * qw), T, qw),
                     d.I32(cu).ptr<int32_t>(), static_cast<int>(lens.size()), 257, ac);
      d.be->Attention(p);
      return d.Get(p.out);
    });
    EXPECT_NEAR_ALL(g, c, 2e-5, 1e-4)
        << "heads " << ac.heads << "/" << ac.kv_heads << " dim " << ac.dim << " causal "
        << ac.causal << " window " << ac.window;
  }
}

// Key limits (AttentionParams::key_lens, ColBERT expansion tokens no query attends to): the
// keys past each sequence's limit are left out, rows left without a key (a window past the
// limit) are zeros; both CUDA-core kernels (head_dim % 4 == 0 and not) against the CPU.
TEST_F(CudaOps, AttentionKeyLimits) {
  const std::vector<int32_t> lens = {1, 7, 33, 100, 257, 2};
  const std::vector<int32_t> key_lens = {1, 3, 33, 40, 100, INT32_MAX};
  std::vector<int32_t> cu = {0};
  for (int l : lens) cu.push_back(cu.back() + l);
  const int T = cu.back();
  const AttnCase cases[] = {{4, 4, 64, false, 0},
                            {2, 2, 30, false, 0},
                            {4, 2, 64, false, 5},
                            {3, 1, 30, true, 0},
                            {4, 4, 128, true, 9}};
  for (const auto& ac : cases) {
    const int qw = ac.heads * ac.dim, kw = ac.kv_heads * ac.dim, width = qw + 2 * kw;
    auto qkv = Random(static_cast<size_t>(T) * width, 19 + ac.dim, -2.f, 2.f);
    auto [g, c] = Both([&](Dev& d) {
      Tensor t = d.F32(qkv, T, width);
      AttentionParams p =
          AttnParams(t, d.F32(std::vector<float>(static_cast<size_t>(T) * qw, -1.f), T, qw),
                     d.I32(cu).ptr<int32_t>(), static_cast<int>(lens.size()), 257, ac);
      p.key_lens = d.I32(key_lens).ptr<int32_t>();
      d.be->Attention(p);
      return d.Get(p.out);
    });
    EXPECT_NEAR_ALL(g, c, 2e-5, 1e-4)
        << "heads " << ac.heads << "/" << ac.kv_heads << " dim " << ac.dim << " causal "
        << ac.causal << " window " << ac.window;
  }
}

// A sequence's attention output is bit-identical alone, inside a batch and duplicated.
TEST_F(CudaOps, AttentionBatchInvariant) {
  const int heads = 4, kvh = 2, dim = 128, qw = heads * dim, kw = kvh * dim, width = qw + 2 * kw;
  const int L = 77;
  auto seq = Random(static_cast<size_t>(L) * width, 30, -2.f, 2.f);
  auto run = [&](const std::vector<std::vector<float>>& seqs, bool causal) {
    std::vector<int32_t> cu = {0};
    std::vector<float> all;
    int maxlen = 0;
    for (const auto& s : seqs) {
      const int len = static_cast<int>(s.size() / width);
      cu.push_back(cu.back() + len);
      maxlen = std::max(maxlen, len);
      all.insert(all.end(), s.begin(), s.end());
    }
    Tensor t = gpu_.F32(all, cu.back(), width);
    AttentionParams p;
    p.q = t.ColSlice(0, qw);
    p.k = t.ColSlice(qw, kw);
    p.v = t.ColSlice(qw + kw, kw);
    p.out = gpu_.F32(std::vector<float>(static_cast<size_t>(cu.back()) * qw), cu.back(), qw);
    p.cu_seqlens = gpu_.I32(cu).ptr<int32_t>();
    p.num_seqs = static_cast<int>(seqs.size());
    p.max_seqlen = maxlen;
    p.num_heads = heads;
    p.num_kv_heads = kvh;
    p.head_dim = dim;
    p.scale = 0.088f;
    p.causal = causal;
    auto out = gpu_.Get(p.out);
    std::vector<std::vector<float>> per;
    for (size_t s = 0; s < seqs.size(); ++s) {
      per.emplace_back(out.begin() + static_cast<int64_t>(cu[s]) * qw,
                       out.begin() + static_cast<int64_t>(cu[s + 1]) * qw);
    }
    return per;
  };
  for (bool causal : {false, true}) {
    auto alone = run({seq}, causal)[0];
    auto batch = run({Random(13 * width, 31), seq, Random(300 * width, 32), seq}, causal);
    EXPECT_EQ(batch[1], alone) << "causal " << causal;
    EXPECT_EQ(batch[3], alone) << "causal " << causal;
  }
}

struct LinCase {
  int64_t m, k, n;
};

TEST_F(CudaOps, Linear) {
  // m <= 4 with K % 8 == 0 and no activation runs the GEMV kernel (gemv.cu).
  // m >= 1024 takes the timed algorithm choice (incl. an in-place residual, timed on
  // scratch: the residual must be added exactly once).
  const LinCase cases[] = {{1, 7, 5},
                           {37, 64, 96},
                           {130, 257, 129},
                           {256, 384, 1152},
                           {5, 1024, 3},
                           {1500, 96, 200},
                           // decode-sized (the GEMV kernel, K split over 1..8 warps)
                           {1, 1024, 1000},
                           {2, 3072, 768},
                           {3, 96, 4096},
                           {4, 2048, 257},
                           {1, 4096, 1}};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const auto& lc : cases) {
      for (int variant = 0; variant < 6; ++variant) {
        const bool bias = variant % 2 == 1;
        const Activation act = variant < 2   ? Activation::kNone
                               : variant < 4 ? Activation::kGeluErf
                                             : Activation::kRelu;
        const bool residual = (variant + lc.m) % 3 != 0;
        auto w = Random(lc.n * lc.k, 40, -0.5f, 0.5f), b = Random(lc.n, 41);
        auto x = Random(lc.m * (lc.k + 2), 42, -1.f, 1.f);
        auto r = Random(lc.m * lc.n, 43);
        // The CPU has no f16: it runs f32 on f16-rounded weights and activations.
        const DType cpu_dt = dt == DType::kF16 ? DType::kF32 : dt;
        auto [g, c] = Both([&](Dev& d) {
          const bool gpu = d.be->kind() == DeviceKind::kCuda;
          const auto& wv = gpu || dt != DType::kF16 ? w : Rounded(w, DType::kF16);
          const auto& xv = gpu || dt != DType::kF16 ? x : Rounded(x, DType::kF16);
          HostTensor hw{wv.data(), DType::kF32, {lc.n, lc.k}, "w"};
          HostTensor hb{b.data(), DType::kF32, {lc.n}, "b"};
          auto lw = d.be->PrepareLinear(hw, bias ? &hb : nullptr, gpu ? dt : cpu_dt);
          EXPECT_TRUE(lw.ok()) << lw.status().ToString();
          Tensor tx = d.F32(xv, lc.m, lc.k + 2).ColSlice(1, lc.k);  // strided input
          Tensor out = d.F32(r, lc.m, lc.n);
          Tensor res = out;
          d.be->Linear({lw->get(), tx, out, act, residual ? &res : nullptr});
          return d.Get(out);
        });
        const double tol = dt == DType::kF32 ? 1e-4 : 2e-4;
        EXPECT_NEAR_ALL(g, c, tol, tol)
            << DTypeName(dt) << " " << lc.m << "x" << lc.k << "x" << lc.n << " bias " << bias
            << " act " << int(act) << " residual " << residual;
      }
    }
  }
}

// A row's Linear output is the same whatever batch it is in (within fp32 rounding across
// batch sizes, bit-identical for duplicates within one batch).
TEST_F(CudaOps, LinearBatchInvariance) {
  const int64_t k = 384, n = 1152;
  auto w = Random(n * k, 50, -0.5f, 0.5f);
  HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
  for (DType dt : {DType::kF32, DType::kBF16}) {
    auto lw = gpu_.be->PrepareLinear(hw, nullptr, dt);
    ASSERT_TRUE(lw.ok());
    auto row = Random(k, 51);
    auto one = [&](int64_t m) {
      std::vector<float> x = Random(m * k, 52 + static_cast<uint32_t>(m));
      std::copy(row.begin(), row.end(), x.begin() + (m / 2) * k);
      std::copy(row.begin(), row.end(), x.begin() + (m - 1) * k);
      Tensor tx = gpu_.F32(x, m, k), out = gpu_.F32(std::vector<float>(m * n), m, n);
      gpu_.be->Linear({lw->get(), tx, out});
      auto o = gpu_.Get(out);
      std::vector<float> a(o.begin() + (m / 2) * n, o.begin() + (m / 2 + 1) * n);
      std::vector<float> b(o.end() - n, o.end());
      EXPECT_EQ(a, b) << "duplicates differ at m=" << m;
      return a;
    };
    auto ref = one(1);
    for (int64_t m : {2, 9, 64, 333, 1000, 1500, 3000}) {
      EXPECT_NEAR_ALL(one(m), ref, 1e-5, 1e-5) << DTypeName(dt) << " m=" << m;
    }
  }
}

// Paged decode attention (one query per sequence: the split-K decode kernel on CUDA) against
// the CPU's paged attention, f32 and bf16 (CPU on bf16-rounded inputs), GQA groups 1-8,
// head_dim 64/128, contexts from 1 key to more than 16 splits of 64, sliding windows, block
// tables in shuffled order, and a padding sequence of no tokens (as decode graphs add).
TEST_F(CudaOps, PagedDecodeAttention) {
  const std::vector<int> ctx = {1, 17, 64, 65, 300, 1100, 3};
  const int S = static_cast<int>(ctx.size()) + 1;  // + one empty padding sequence
  const int kBlock = 16, Hkv = 2;
  int bps = 0, total_blocks = 1;  // block 0: never used, as in the pool
  for (int c : ctx) {
    bps = std::max(bps, (c + kBlock - 1) / kBlock);
    total_blocks += (c + kBlock - 1) / kBlock;
  }
  std::vector<int32_t> order(total_blocks - 1);
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i + 1);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::vector<int32_t> table(static_cast<size_t>(S) * bps, 0), start(S, 0), cu(S + 1, 0);
  size_t next = 0;
  for (int s = 0; s < S; ++s) {
    const int c = s < static_cast<int>(ctx.size()) ? ctx[s] : 0;
    for (int b = 0; b < (c + kBlock - 1) / kBlock; ++b) table[s * bps + b] = order[next++];
    start[s] = std::max(0, c - 1);
    cu[s + 1] = cu[s] + (c > 0 ? 1 : 0);
  }
  const int T = cu[S], max_context = 1100;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (int G : {1, 2, 4, 8}) {
      for (int D : {64, 128}) {
        for (int window : {0, 100}) {
          const int Hq = G * Hkv;
          auto q = Random(static_cast<size_t>(T) * Hq * D, 60 + G, -1.f, 1.f);
          auto kc = Random(static_cast<size_t>(total_blocks) * kBlock * Hkv * D, 61, -1.f, 1.f);
          auto vc = Random(static_cast<size_t>(total_blocks) * kBlock * Hkv * D, 62, -1.f, 1.f);
          auto [g, c] = Both([&](Dev& d) {
            const bool gpu = d.be->kind() == DeviceKind::kCuda;
            const DType t = gpu ? dt : DType::kF32;
            auto in = [&](const std::vector<float>& v) { return gpu ? v : Rounded(v, dt); };
            AttentionParams p;
            p.q = d.Table(in(q), T, Hq * D, t);
            p.k = d.Table(in(kc), static_cast<int64_t>(total_blocks) * kBlock, Hkv * D, t);
            p.v = d.Table(in(vc), static_cast<int64_t>(total_blocks) * kBlock, Hkv * D, t);
            p.out = d.Table(std::vector<float>(static_cast<size_t>(T) * Hq * D, 0.f), T, Hq * D, t);
            // The CPU reads its index arrays from host memory, the GPU from device memory.
            p.cu_seqlens = gpu ? d.I32(cu).ptr<int32_t>() : cu.data();
            p.kv_block_table = gpu ? d.I32(table).ptr<int32_t>() : table.data();
            p.kv_start = gpu ? d.I32(start).ptr<int32_t>() : start.data();
            p.num_seqs = S;
            p.max_seqlen = 1;
            p.num_heads = Hq;
            p.num_kv_heads = Hkv;
            p.head_dim = D;
            p.scale = 1.f / std::sqrt(static_cast<float>(D));
            p.causal = true;
            p.window = window;
            p.kv_blocks_per_seq = bps;
            p.kv_block_size = kBlock;
            p.max_context = max_context;
            d.be->Attention(p);
            auto out = d.Get(p.out);
            return gpu ? out : Rounded(out, dt);
          });
          const double tol = dt == DType::kF32 ? 2e-5 : 1.6e-2;
          EXPECT_NEAR_ALL(g, c, tol, dt == DType::kF32 ? 1e-4 : 1.6e-2)
              << DTypeName(dt) << " G " << G << " D " << D << " window " << window;
        }
      }
    }
  }
}

}  // namespace
}  // namespace sluice
