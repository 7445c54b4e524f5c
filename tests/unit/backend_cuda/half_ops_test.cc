// CUDA ops on bf16/f16 activations (what models use on CUDA next to bf16/f16 weights, see
// Backend::ActivationDType) against the CPU backend in f32 on the same rounded inputs.
// Skipped without a CUDA device.
//
// Tolerances (max |gpu - cpu| <= atol + rtol * |cpu|): the GPU computes in fp32 and rounds
// its output once to the activation dtype (bf16: 8 significant bits, f16: 11); attention
// also rounds P to that dtype for the P·V tensor-core product, as FlashAttention does.
//   bf16: element-wise/norms/RoPE atol 1e-2 rtol 8e-3; attention atol 2e-2 rtol 2e-2
//   f16:  element-wise/norms/RoPE atol 2e-3 rtol 1e-3; attention atol 4e-3 rtol 4e-3
//   Linear (fp32 accumulation, K <= 1024): bf16 out atol 2e-2 rtol 1e-2; f32 out 2e-4
#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "compare.h"

namespace sluice {
namespace {

using cuda_test::Random;
using cuda_test::Rounded;

struct Tol {
  double atol, rtol;
};
Tol ElemTol(DType dt) { return dt == DType::kBF16 ? Tol{1e-2, 8e-3} : Tol{2e-3, 1e-3}; }
Tol AttnTol(DType dt) { return dt == DType::kBF16 ? Tol{2e-2, 2e-2} : Tol{4e-3, 4e-3}; }

class CudaHalfOps : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = CreateBackend(BackendOptions{DeviceKind::kCuda, 0, 0});
    if (!g.ok()) GTEST_SKIP() << "no CUDA backend: " << g.status().ToString();
    gpu_ = std::move(g).value();
    auto c = CreateBackend(BackendOptions{DeviceKind::kCpu, 0, 2});
    ASSERT_TRUE(c.ok());
    cpu_ = std::move(c).value();
  }
  // A device tensor of dtype dt holding v (rounded).
  Tensor Make(Backend* be, const std::vector<float>& v, int64_t rows, int64_t cols, DType dt) {
    HostTensor h{v.data(), DType::kF32, {rows, cols}, "t"};
    auto b = be->Upload(h, dt);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    keep_.push_back(std::move(b).value());
    return keep_.back().t();
  }
  Tensor I32(Backend* be, const std::vector<int32_t>& v) {
    keep_.push_back(be->Allocate(DType::kI32, 1, static_cast<int64_t>(v.size())));
    be->CopyFromHost(v.data(), keep_.back().t());
    return keep_.back().t();
  }
  std::vector<float> Get(Backend* be, const Tensor& t) {
    std::vector<float> out(t.numel());
    be->CopyToHostF32(t, out.data());
    return out;
  }
  std::unique_ptr<Backend> gpu_, cpu_;
  std::vector<Buffer> keep_;
};

constexpr DType kHalf[] = {DType::kBF16, DType::kF16};

TEST_F(CudaHalfOps, ActivationDType) {
  EXPECT_EQ(gpu_->ActivationDType(DType::kBF16), DType::kBF16);
  EXPECT_EQ(gpu_->ActivationDType(DType::kF16), DType::kF16);
  EXPECT_EQ(gpu_->ActivationDType(DType::kF32), DType::kF32);
  EXPECT_EQ(cpu_->ActivationDType(DType::kBF16), DType::kF32);
}

TEST_F(CudaHalfOps, GatedAndElementWise) {
  for (DType dt : kHalf) {
    const Tol tol = ElemTol(dt);
    for (int64_t rows : {1, 5, 130}) {
      for (int64_t cols : {7, 64, 100, 3072}) {  // 64, 3072: the 16-byte bf16 path
        for (auto act : {Activation::kSilu, Activation::kGeluErf, Activation::kGeluTanh}) {
          auto gu = Rounded(Random(rows * 2 * cols, 4, -6.f, 6.f), dt);
          Tensor in = Make(gpu_.get(), gu, rows, 2 * cols, dt);
          Tensor out = Make(gpu_.get(), std::vector<float>(rows * cols), rows, cols, dt);
          gpu_->GatedActivate(in, act, out);
          Tensor cin = Make(cpu_.get(), gu, rows, 2 * cols, DType::kF32);
          Tensor cout = Make(cpu_.get(), std::vector<float>(rows * cols), rows, cols, DType::kF32);
          cpu_->GatedActivate(cin, act, cout);
          EXPECT_NEAR_ALL(Get(gpu_.get(), out), Get(cpu_.get(), cout), tol.atol, tol.rtol)
              << DTypeName(dt) << " gated " << rows << "x" << cols << " act " << int(act);
          // In-place activation and Add on the same dtype.
          gpu_->Activate(out, act);
          cpu_->Activate(cout, act);
          EXPECT_NEAR_ALL(Get(gpu_.get(), out), Get(cpu_.get(), cout), 2 * tol.atol, 2 * tol.rtol)
              << DTypeName(dt) << " activate";
        }
      }
    }
  }
}

TEST_F(CudaHalfOps, NormsIntoHalf) {
  for (DType dt : kHalf) {
    const Tol tol = ElemTol(dt);
    for (int64_t rows : {1, 17, 130}) {
      // 384, 768, 1024: the warp-per-row kernels (MiniLM, BERT-base, Qwen3-0.6B widths);
      // 5000 > 16 registers per thread
      for (int64_t cols : {64, 384, 768, 1024, 4099, 5000}) {
        auto x = Random(rows * cols, 7, -3.f, 3.f), w = Random(cols, 9, 0.5f, 1.5f);
        auto b = Random(cols, 10);
        // RMSNorm: f32 residual stream -> half output.
        Tensor gx = Make(gpu_.get(), x, rows, cols, DType::kF32);
        Tensor gw = Make(gpu_.get(), w, 1, cols, DType::kF32);
        Tensor gout = Make(gpu_.get(), std::vector<float>(rows * cols), rows, cols, dt);
        gpu_->RmsNorm(gx, nullptr, gw, 1e-6f, gout);
        Tensor cx = Make(cpu_.get(), x, rows, cols, DType::kF32);
        Tensor cw = Make(cpu_.get(), w, 1, cols, DType::kF32);
        Tensor cout = Make(cpu_.get(), std::vector<float>(rows * cols), rows, cols, DType::kF32);
        cpu_->RmsNorm(cx, nullptr, cw, 1e-6f, cout);
        EXPECT_NEAR_ALL(Get(gpu_.get(), gout), Get(cpu_.get(), cout), tol.atol, tol.rtol)
            << DTypeName(dt) << " rmsnorm " << rows << "x" << cols;
        // RMSNorm of a half residual stream (--residual-dtype activation) into half and f32.
        auto xh = Rounded(x, dt);
        Tensor hres = Make(gpu_.get(), xh, rows, cols, dt);
        Tensor hout = Make(gpu_.get(), std::vector<float>(rows * cols), rows, cols, dt);
        Tensor fout = Make(gpu_.get(), std::vector<float>(rows * cols), rows, cols, DType::kF32);
        gpu_->RmsNorm(hres, nullptr, gw, 1e-6f, hout);
        gpu_->RmsNorm(hres, nullptr, gw, 1e-6f, fout);
        Tensor cxh = Make(cpu_.get(), xh, rows, cols, DType::kF32);
        cpu_->RmsNorm(cxh, nullptr, cw, 1e-6f, cout);
        EXPECT_NEAR_ALL(Get(gpu_.get(), hout), Get(cpu_.get(), cout), tol.atol, tol.rtol)
            << DTypeName(dt) << " rmsnorm of a half residual " << rows << "x" << cols;
        EXPECT_NEAR_ALL(Get(gpu_.get(), fout), Get(cpu_.get(), cout), 1e-5, 1e-5)
            << DTypeName(dt) << " rmsnorm of a half residual, f32 out " << rows << "x" << cols;
        // LayerNorm of a half input into a half output.
        auto xr = Rounded(x, dt);
        Tensor hx = Make(gpu_.get(), xr, rows, cols, dt);
        Tensor gb = Make(gpu_.get(), b, 1, cols, DType::kF32);
        gpu_->LayerNorm(hx, nullptr, gw, &gb, 1e-5f, hx);
        Tensor cxr = Make(cpu_.get(), xr, rows, cols, DType::kF32);
        Tensor cb = Make(cpu_.get(), b, 1, cols, DType::kF32);
        cpu_->LayerNorm(cxr, nullptr, cw, &cb, 1e-5f, cxr);
        EXPECT_NEAR_ALL(Get(gpu_.get(), hx), Get(cpu_.get(), cxr), tol.atol, tol.rtol)
            << DTypeName(dt) << " layernorm " << rows << "x" << cols;
      }
    }
  }
}

// QkNormRope (fused on CUDA) against the CPU's RmsNorm(group) + Rope, in f32 and half.
TEST_F(CudaHalfOps, QkNormRope) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    const Tol tol = dt == DType::kF32 ? Tol{1e-5, 1e-5} : ElemTol(dt);
    for (auto style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
      for (int dim : {64, 128}) {
        for (int rot : {dim, dim / 2}) {
          for (int max_position : {0, 5000}) {  // computed angles and the cached table
            const int heads = 3, T = 41, width = heads * dim + 2 * dim;
            auto x = Rounded(Random(T * width, 13, -2.f, 2.f), dt);
            auto w = Random(dim, 14, 0.5f, 1.5f);
            std::vector<int32_t> pos(T);
            for (int t = 0; t < T; ++t) pos[t] = (t * 97) % 5000;
            auto run = [&](Backend* be, DType t_dt) {
              Tensor tx = Make(be, x, T, width, t_dt), tp = I32(be, pos);
              Tensor tw = Make(be, w, 1, dim, DType::kF32);
              be->QkNormRope(cuda_test::RopeOf(tx.ColSlice(dim, heads * dim), tp, heads, dim, rot,
                                               1000000.0, style, max_position),
                             tw, 1e-6f);
              return Get(be, tx);
            };
            EXPECT_NEAR_ALL(run(gpu_.get(), dt), run(cpu_.get(), DType::kF32), tol.atol, tol.rtol)
                << DTypeName(dt) << " style " << int(style) << " dim " << dim << " rot " << rot
                << " table " << max_position;
          }
        }
      }
    }
  }
}

using cuda_test::AttnCase;
using cuda_test::AttnParams;

// dims 32/64/128 take the tensor-core kernel; 48 and 80 the CUDA-core kernels on half data.
TEST_F(CudaHalfOps, Attention) {
  const std::vector<int32_t> lens = {1, 7, 33, 64, 65, 100, 257, 2};
  std::vector<int32_t> cu = {0};
  for (int l : lens) cu.push_back(cu.back() + l);
  const int T = cu.back();
  const AttnCase cases[] = {{4, 4, 64, false, 0},  {4, 4, 64, true, 0},   {16, 8, 128, true, 0},
                            {8, 2, 128, false, 0}, {6, 3, 32, false, 0},  {6, 6, 32, true, 0},
                            {4, 2, 64, false, 16}, {4, 4, 128, true, 40}, {2, 1, 80, true, 0},
                            {3, 1, 48, false, 0}};
  for (DType dt : kHalf) {
    const Tol tol = AttnTol(dt);
    for (const auto& ac : cases) {
      const int qw = ac.heads * ac.dim, kw = ac.kv_heads * ac.dim, width = qw + 2 * kw;
      auto qkv = Rounded(Random(static_cast<size_t>(T) * width, 17 + ac.dim, -2.f, 2.f), dt);
      auto run = [&](Backend* be, DType t_dt) {
        Tensor t = Make(be, qkv, T, width, t_dt);
        Tensor out = Make(be, std::vector<float>(static_cast<size_t>(T) * qw), T, qw, t_dt);
        be->Attention(
            AttnParams(t, out, I32(be, cu).ptr<int32_t>(), static_cast<int>(lens.size()), 257, ac));
        return Get(be, out);
      };
      EXPECT_NEAR_ALL(run(gpu_.get(), dt), run(cpu_.get(), DType::kF32), tol.atol, tol.rtol)
          << DTypeName(dt) << " heads " << ac.heads << "/" << ac.kv_heads << " dim " << ac.dim
          << " causal " << ac.causal << " window " << ac.window;
    }
  }
}

// Key limits (AttentionParams::key_lens) on the tensor-core kernel (head_dim 32, 64, 128),
// windows past the limit included (those rows are zeros), against the CPU in f32.
TEST_F(CudaHalfOps, AttentionKeyLimits) {
  const std::vector<int32_t> lens = {1, 7, 33, 64, 65, 100, 257, 2};
  const std::vector<int32_t> key_lens = {1, 2, 17, 64, 64, 31, 129, INT32_MAX};
  std::vector<int32_t> cu = {0};
  for (int l : lens) cu.push_back(cu.back() + l);
  const int T = cu.back();
  const AttnCase cases[] = {{4, 4, 64, false, 0},  {8, 2, 128, false, 0}, {6, 3, 32, false, 0},
                            {4, 2, 64, false, 16}, {4, 4, 128, true, 40}, {6, 6, 32, true, 0}};
  for (DType dt : kHalf) {
    const Tol tol = AttnTol(dt);
    for (const auto& ac : cases) {
      const int qw = ac.heads * ac.dim, kw = ac.kv_heads * ac.dim, width = qw + 2 * kw;
      auto qkv = Rounded(Random(static_cast<size_t>(T) * width, 23 + ac.dim, -2.f, 2.f), dt);
      auto run = [&](Backend* be, DType t_dt) {
        Tensor t = Make(be, qkv, T, width, t_dt);
        Tensor out = Make(be, std::vector<float>(static_cast<size_t>(T) * qw, -1.f), T, qw, t_dt);
        AttentionParams p =
            AttnParams(t, out, I32(be, cu).ptr<int32_t>(), static_cast<int>(lens.size()), 257, ac);
        p.key_lens = I32(be, key_lens).ptr<int32_t>();
        be->Attention(p);
        return Get(be, out);
      };
      EXPECT_NEAR_ALL(run(gpu_.get(), dt), run(cpu_.get(), DType::kF32), tol.atol, tol.rtol)
          << DTypeName(dt) << " heads " << ac.heads << "/" << ac.kv_heads << " dim " << ac.dim
          << " causal " << ac.causal << " window " << ac.window;
    }
  }
}

// Scores that grow along the sequence (keys scaled up with their position, queries
// positive): a row's maximum moves past the tensor-core kernel's lazy-rescale threshold
// (2^8) on later tiles, many times per row, so O and l are rescaled from a finite maximum;
// and scores that shrink (the first tile holds the maximum: no rescale at all). Both
// against the CPU's exact softmax.
TEST_F(CudaHalfOps, AttentionRunningMaximumMoves) {
  const std::vector<int32_t> lens = {1, 40, 100, 257};
  std::vector<int32_t> cu = {0};
  for (int l : lens) cu.push_back(cu.back() + l);
  const int T = cu.back();
  const AttnCase cases[] = {
      {16, 8, 128, true, 0}, {4, 4, 128, false, 0}, {4, 2, 64, true, 0}, {6, 6, 32, true, 0}};
  for (DType dt : kHalf) {
    const Tol tol = AttnTol(dt);
    for (bool grow : {true, false}) {
      for (const auto& ac : cases) {
        const int qw = ac.heads * ac.dim, kw = ac.kv_heads * ac.dim, width = qw + 2 * kw;
        auto qkv = Random(static_cast<size_t>(T) * width, 23 + ac.dim, -1.f, 1.f);
        for (size_t s = 0; s < lens.size(); ++s) {
          for (int i = 0; i < lens[s]; ++i) {
            float* row = qkv.data() + static_cast<size_t>(cu[s] + i) * width;
            for (int c = 0; c < qw; ++c) row[c] = 0.5f + 0.5f * std::fabs(row[c]);  // q > 0
            // k > 0, scaled so that a key's score is ~0.35 * position (or 90 minus it)
            // in log2 units: dozens of units between the first and the last tile.
            const float scale = grow ? 0.05f * static_cast<float>(i) + 0.05f
                                     : 0.05f * static_cast<float>(lens[s] - i) + 0.05f;
            for (int c = qw; c < qw + kw; ++c) {
              row[c] = scale * 8.f / std::sqrt(static_cast<float>(ac.dim)) *
                       (0.5f + 0.5f * std::fabs(row[c]));
            }
          }
        }
        qkv = Rounded(qkv, dt);
        auto run = [&](Backend* be, DType t_dt) {
          Tensor t = Make(be, qkv, T, width, t_dt);
          Tensor out = Make(be, std::vector<float>(static_cast<size_t>(T) * qw), T, qw, t_dt);
          be->Attention(AttnParams(t, out, I32(be, cu).ptr<int32_t>(),
                                   static_cast<int>(lens.size()), 257, ac));
          return Get(be, out);
        };
        EXPECT_NEAR_ALL(run(gpu_.get(), dt), run(cpu_.get(), DType::kF32), tol.atol, tol.rtol)
            << DTypeName(dt) << (grow ? " growing" : " shrinking") << " scores, heads " << ac.heads
            << "/" << ac.kv_heads << " dim " << ac.dim << " causal " << ac.causal;
      }
    }
  }
}

// The tensor-core kernel is batch invariant: a sequence's output is bit-identical alone,
// in a batch and duplicated.
TEST_F(CudaHalfOps, AttentionBatchInvariant) {
  const AttnCase ac{16, 8, 128, true, 0};
  const int qw = ac.heads * ac.dim, width = qw + 2 * ac.kv_heads * ac.dim, L = 141;
  auto seq = Random(static_cast<size_t>(L) * width, 30, -2.f, 2.f);
  for (bool causal : {false, true}) {
    AttnCase c = ac;
    c.causal = causal;
    auto run = [&](const std::vector<std::vector<float>>& seqs) {
      std::vector<int32_t> cu = {0};
      std::vector<float> all;
      int maxlen = 0;
      for (const auto& s : seqs) {
        const int len = static_cast<int>(s.size() / width);
        cu.push_back(cu.back() + len);
        maxlen = std::max(maxlen, len);
        all.insert(all.end(), s.begin(), s.end());
      }
      Tensor t = Make(gpu_.get(), all, cu.back(), width, DType::kBF16);
      Tensor out = Make(gpu_.get(), std::vector<float>(static_cast<size_t>(cu.back()) * qw),
                        cu.back(), qw, DType::kBF16);
      gpu_->Attention(AttnParams(t, out, I32(gpu_.get(), cu).ptr<int32_t>(),
                                 static_cast<int>(seqs.size()), maxlen, c));
      auto o = Get(gpu_.get(), out);
      std::vector<std::vector<float>> per;
      for (size_t s = 0; s < seqs.size(); ++s) {
        per.emplace_back(o.begin() + static_cast<int64_t>(cu[s]) * qw,
                         o.begin() + static_cast<int64_t>(cu[s + 1]) * qw);
      }
      return per;
    };
    auto alone = run({seq})[0];
    auto batch = run({Random(13 * width, 31), seq, Random(300 * width, 32), seq});
    EXPECT_EQ(batch[1], alone) << "causal " << causal;
    EXPECT_EQ(batch[3], alone) << "causal " << causal;
  }
}

// Shared-prefix attention (AttentionParams::prefix_of) equals attention over the expanded
// sequences (prefix rows + own rows), bit for bit: several prefixes in one batch (one of
// them used by a non-adjacent sequence, one a single token) between sequences without a
// prefix; tensor-core (dims 64/128) and CUDA-core kernels (dims 48/80 by rows, 50 one row
// per warp), bf16 and f32, GQA, sliding windows, tails shorter and longer than a tile.
TEST_F(CudaHalfOps, AttentionSharedPrefix) {
  const AttnCase cases[] = {{16, 8, 128, true, 0}, {4, 4, 64, true, 0}, {4, 2, 64, true, 0},
                            {4, 2, 64, true, 24},  {4, 2, 80, true, 0}, {4, 2, 48, true, 0},
                            {4, 2, 48, true, 24},  {4, 2, 50, true, 0}};
  // Packed sequences: {length, index of the prefix sequence or -1}.
  const std::vector<std::pair<int, int>> seqs = {
      {30, -1},                               // 0: no prefix
      {40, -1}, {1, 1},   {13, 1},  {64, 1},  // 1: prefix; 2-4 use it
      {70, -1}, {101, 5}, {200, 5},           // 5: prefix; 6-7 use it
      {17, -1}, {5, 1},                       // 8: no prefix; 9 uses 1 again
      {1, -1},  {2, 10},  {65, 10}};          // 10: a one-token prefix
  for (DType dt : {DType::kBF16, DType::kF32}) {
    for (const auto& ac : cases) {
      const int qw = ac.heads * ac.dim, width = qw + 2 * ac.kv_heads * ac.dim;
      std::vector<std::vector<float>> rows;  // each packed sequence's q/k/v rows
      for (size_t i = 0; i < seqs.size(); ++i) {
        rows.push_back(Random(static_cast<size_t>(seqs[i].first) * width, 60 + static_cast<int>(i),
                              -2.f, 2.f));
      }
      std::vector<float> packed, full;
      std::vector<int32_t> cu = {0}, fcu = {0}, prefix_of;
      int max_len = 0, max_full = 0;
      for (size_t i = 0; i < seqs.size(); ++i) {
        const auto [len, pre] = seqs[i];
        packed.insert(packed.end(), rows[i].begin(), rows[i].end());
        cu.push_back(cu.back() + len);
        prefix_of.push_back(pre);
        max_len = std::max(max_len, len);
        // Expanded: the prefix's rows, then the sequence's own.
        if (pre >= 0) full.insert(full.end(), rows[pre].begin(), rows[pre].end());
        full.insert(full.end(), rows[i].begin(), rows[i].end());
        const int flen = len + (pre >= 0 ? seqs[pre].first : 0);
        fcu.push_back(fcu.back() + flen);
        max_full = std::max(max_full, flen);
      }
      auto run = [&](const std::vector<float>& x, const std::vector<int32_t>& c, int maxlen,
                     const std::vector<int32_t>* pre) {
        const int T = c.back();
        Tensor t = Make(gpu_.get(), x, T, width, dt);
        Tensor out = Make(gpu_.get(), std::vector<float>(static_cast<size_t>(T) * qw), T, qw, dt);
        AttentionParams p = AttnParams(t, out, I32(gpu_.get(), c).ptr<int32_t>(),
                                       static_cast<int>(c.size()) - 1, maxlen, ac);
        if (pre != nullptr) p.prefix_of = I32(gpu_.get(), *pre).ptr<int32_t>();
        gpu_->Attention(p);
        return Get(gpu_.get(), out);
      };
      const auto a = run(packed, cu, max_len, &prefix_of);
      const auto b = run(full, fcu, max_full, nullptr);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const auto [len, pre] = seqs[i];
        const int skip = pre >= 0 ? seqs[pre].first : 0;  // the expanded prefix rows
        std::vector<float> ga(a.begin() + static_cast<int64_t>(cu[i]) * qw,
                              a.begin() + static_cast<int64_t>(cu[i + 1]) * qw);
        std::vector<float> gb(b.begin() + static_cast<int64_t>(fcu[i] + skip) * qw,
                              b.begin() + static_cast<int64_t>(fcu[i] + skip + len) * qw);
        EXPECT_EQ(ga, gb) << DTypeName(dt) << " dim " << ac.dim << " window " << ac.window
                          << " sequence " << i << " (length " << len << ", prefix " << pre << ")";
      }
    }
  }
}

// Linear with half activations: x and out in bf16/f16 (bias, activation), out f32 with an
// f32 residual (beta = 1), and half out with an f32 residual (scratch path).
TEST_F(CudaHalfOps, Linear) {
  struct LinCase {
    int64_t m, k, n;
  };
  const LinCase cases[] = {{1, 64, 8}, {37, 64, 96}, {130, 256, 136}, {256, 1024, 1152}};
  for (DType dt : kHalf) {
    for (const auto& lc : cases) {
      auto w = Random(lc.n * lc.k, 40, -0.5f, 0.5f), b = Random(lc.n, 41);
      auto x = Rounded(Random(lc.m * lc.k, 42, -1.f, 1.f), dt);
      auto r = Random(lc.m * lc.n, 43);
      HostTensor hw{w.data(), DType::kF32, {lc.n, lc.k}, "w"};
      HostTensor hb{b.data(), DType::kF32, {lc.n}, "b"};
      auto hwr = Rounded(w, dt);
      HostTensor hwc{hwr.data(), DType::kF32, {lc.n, lc.k}, "w"};
      for (int variant = 0; variant < 4; ++variant) {
        const bool bias = variant == 1 || variant == 2;
        const Activation act = variant == 2 ? Activation::kGeluErf : Activation::kNone;
        const bool residual = variant == 3;
        for (DType out_dt : {dt, DType::kF32}) {
          auto glw = gpu_->PrepareLinear(hw, bias ? &hb : nullptr, dt);
          ASSERT_TRUE(glw.ok());
          Tensor gx = Make(gpu_.get(), x, lc.m, lc.k, dt);
          Tensor gout = Make(gpu_.get(), r, lc.m, lc.n, out_dt);
          Tensor gres = Make(gpu_.get(), r, lc.m, lc.n, DType::kF32);
          gpu_->Linear({glw->get(), gx, gout, act, residual ? &gres : nullptr});
          auto clw = cpu_->PrepareLinear(hwc, bias ? &hb : nullptr, DType::kF32);
          ASSERT_TRUE(clw.ok());
          Tensor cx = Make(cpu_.get(), x, lc.m, lc.k, DType::kF32);
          Tensor cout = Make(cpu_.get(), r, lc.m, lc.n, DType::kF32);
          Tensor cres = Make(cpu_.get(), r, lc.m, lc.n, DType::kF32);
          cpu_->Linear({clw->get(), cx, cout, act, residual ? &cres : nullptr});
          const Tol tol = out_dt == DType::kF32
                              ? Tol{2e-4, 2e-4}
                              : (dt == DType::kBF16 ? Tol{2e-2, 1e-2} : Tol{4e-3, 2e-3});
          EXPECT_NEAR_ALL(Get(gpu_.get(), gout), Get(cpu_.get(), cout), tol.atol, tol.rtol)
              << DTypeName(dt) << " out " << DTypeName(out_dt) << " " << lc.m << "x" << lc.k << "x"
              << lc.n << " variant " << variant;
        }
      }
    }
  }
}

TEST_F(CudaHalfOps, PoolAndGatherHalf) {
  const int64_t H = 67;
  const std::vector<int32_t> cu = {0, 1, 8, 41, 191};
  for (DType dt : kHalf) {
    auto hidden = Rounded(Random(cu.back() * H, 16, -5.f, 5.f), dt);
    for (auto mode : {PoolMode::kCls, PoolMode::kMean, PoolMode::kLast, PoolMode::kMax}) {
      auto run = [&](Backend* be, DType t_dt) {
        PoolParams p;
        p.hidden = Make(be, hidden, cu.back(), H, t_dt);
        p.out = Make(be, std::vector<float>(4 * H), 4, H, DType::kF32);
        p.cu_seqlens = I32(be, cu).ptr<int32_t>();
        p.num_seqs = 4;
        p.mode = mode;
        be->Pool(p);
        return Get(be, p.out);
      };
      EXPECT_NEAR_ALL(run(gpu_.get(), dt), run(cpu_.get(), DType::kF32), 1e-5, 1e-5)
          << DTypeName(dt) << " pool " << int(mode);
    }
  }
}

}  // namespace
}  // namespace sluice
