// The CUDA backend's fused decode operations against its own unfused operations:
// LinearBlock (RMSNorm prologue and SiLU-gated epilogue inside the GEMV kernel, decode
// batches of 1-4 rows; within one output rounding, the GEMV's K split may differ; with a
// residual and no norm bit for bit) and AttentionInputs (QK-norm + RoPE + KV-cache write in
// one kernel; bit for bit with the norm). They keep the unfused operations' roundings; that
// the fused kernel ran is checked through what only the unfused path writes (the scratch
// tensors of LinearBlock, k rotated in place by AttentionInputs). Skipped without a CUDA
// device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "compare.h"

namespace sluice {
namespace {

using cuda_test::Random;

class CudaFusedOps : public ::testing::Test {
 protected:
  void SetUp() override {
    auto g = CreateBackend(BackendOptions{DeviceKind::kCuda, 0, 0});
    if (!g.ok()) GTEST_SKIP() << "no CUDA backend: " << g.status().ToString();
    gpu_ = std::move(g).value();
  }
  Tensor Make(const std::vector<float>& v, int64_t rows, int64_t cols, DType dt) {
    HostTensor h{v.data(), DType::kF32, {rows, cols}, "t"};
    auto b = gpu_->Upload(h, dt);
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    keep_.push_back(std::move(b).value());
    return keep_.back().t();
  }
  Tensor I32(const std::vector<int32_t>& v) {
    keep_.push_back(gpu_->Allocate(DType::kI32, 1, static_cast<int64_t>(v.size())));
    gpu_->CopyFromHost(v.data(), keep_.back().t());
    return keep_.back().t();
  }
  std::vector<float> Get(const Tensor& t) {
    std::vector<float> out(t.numel());
    gpu_->CopyToHostF32(t, out.data());
    return out;
  }
  std::unique_ptr<Backend> gpu_;
  std::vector<Buffer> keep_;
};

// Exact equality of two float vectors (NaN never equal), with the first mismatch reported.
::testing::AssertionResult Identical(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(a[i] == b[i])) {
      return ::testing::AssertionFailure() << "element " << i << ": " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

bool AllEqualTo(const std::vector<float>& v, float x) {
  return std::all_of(v.begin(), v.end(), [x](float e) { return e == x; });
}

struct BlockCase {
  int64_t k, n;  // n: the weight's rows (both halves with a gate)
  bool norm, gate, bias;
};

TEST_F(CudaFusedOps, LinearBlockEqualsUnfused) {
  const BlockCase cases[] = {
      {1024, 4096, true, false, false},  // Qwen3-0.6B QKV (warp-kernel norm)
      {64, 256, true, false, true},      // tiny QKV with bias (row-kernel norm)
      {1024, 6144, true, true, false},   // 0.6B gate/up: norm + SiLU gate
      {64, 192, true, true, true},       // tiny MLP with biases
      {256, 512, false, true, false},    // gate only
  };
  const float kSentinel = 12288.f;  // exact in bf16 and f16
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (const BlockCase& bc : cases) {
      for (DType xdt : {DType::kF32, dt}) {
        if (!bc.norm && xdt != dt) continue;  // without the norm x is in the weight dtype
        for (int64_t m = 1; m <= 4; ++m) {
          SCOPED_TRACE(::testing::Message()
                       << DTypeName(dt) << " x " << DTypeName(xdt) << " m " << m << " k " << bc.k
                       << " n " << bc.n << " norm " << bc.norm << " gate " << bc.gate);
          auto w = Random(bc.n * bc.k, 70, -0.08f, 0.08f), b = Random(bc.n, 71, -0.5f, 0.5f);
          HostTensor hw{w.data(), DType::kF32, {bc.n, bc.k}, "w"};
          HostTensor hb{b.data(), DType::kF32, {bc.n}, "b"};
          auto lw = gpu_->PrepareLinear(hw, bc.bias ? &hb : nullptr, dt);
          ASSERT_TRUE(lw.ok()) << lw.status().ToString();
          const int64_t out_cols = bc.gate ? bc.n / 2 : bc.n;
          Tensor x = Make(Random(m * bc.k, 72 + static_cast<int>(m), -2.f, 2.f), m, bc.k, xdt);
          Tensor nw = Make(Random(bc.k, 73, 0.5f, 1.5f), 1, bc.k, DType::kF32);
          const std::vector<float> sentinel_normed(m * bc.k, kSentinel);
          const std::vector<float> sentinel_gu(m * bc.n, kSentinel);
          const std::vector<float> zeros(m * out_cols, 0.f);
          LinearBlockParams p;
          p.weight = lw->get();
          p.x = x;
          p.norm_weight = bc.norm ? &nw : nullptr;
          p.eps = 1e-6f;
          p.gate = bc.gate ? Activation::kSilu : Activation::kNone;
          // Fused.
          p.out = Make(zeros, m, out_cols, dt);
          p.normed = Make(sentinel_normed, m, bc.k, dt);
          p.gate_up = Make(sentinel_gu, m, bc.n, dt);
          gpu_->LinearBlock(p);
          const auto fused = Get(p.out);
          EXPECT_TRUE(AllEqualTo(Get(p.normed), kSentinel)) << "the fused kernel did not run";
          EXPECT_TRUE(AllEqualTo(Get(p.gate_up), kSentinel)) << "the fused kernel did not run";
          // Unfused: the backend's separate operations.
          p.out = Make(zeros, m, out_cols, dt);
          p.normed = Make(sentinel_normed, m, bc.k, dt);
          p.gate_up = Make(sentinel_gu, m, bc.n, dt);
          gpu_->Backend::LinearBlock(p);
          const auto unfused = Get(p.out);
          // The norm and the gate round as the unfused kernels do; the dot products may
          // split K differently (a norm GEMV keeps one warp per row), so the sums differ in
          // their last fp32 bits and the outputs by up to a rounding of the output dtype.
          const double tol = dt == DType::kBF16 ? 1e-2 : 2e-3;
          EXPECT_NEAR_ALL(fused, unfused, tol, tol);
          EXPECT_TRUE(
              std::all_of(fused.begin(), fused.end(), [](float v) { return std::isfinite(v); }));
        }
      }
    }
  }
}

TEST_F(CudaFusedOps, LinearBlockWithResidualEqualsUnfused) {
  // The o/down projections' shape of call: no norm, no gate, f32 residual in place.
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int64_t m = 1; m <= 4; ++m) {
      const int64_t k = 2048, n = 1024;
      auto w = Random(n * k, 80, -0.05f, 0.05f);
      HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
      auto lw = gpu_->PrepareLinear(hw, nullptr, dt);
      ASSERT_TRUE(lw.ok());
      const auto xv = Random(m * k, 81, -1.f, 1.f), rv = Random(m * n, 82, -3.f, 3.f);
      std::vector<float> outs[2];
      for (int fused = 0; fused < 2; ++fused) {
        Tensor x = Make(xv, m, k, dt);
        Tensor r = Make(rv, m, n, DType::kF32);
        LinearBlockParams p;
        p.weight = lw->get();
        p.x = x;
        p.out = r;
        p.residual = &r;
        if (fused) {
          gpu_->LinearBlock(p);
        } else {
          gpu_->Backend::LinearBlock(p);
        }
        outs[fused] = Get(r);
      }
      EXPECT_TRUE(Identical(outs[0], outs[1])) << DTypeName(dt) << " m " << m;
    }
  }
}

struct InputsCase {
  int64_t tokens;
  int hq, hkv, dim;
  bool norm;
};

TEST_F(CudaFusedOps, AttentionInputsEqualUnfused) {
  const InputsCase cases[] = {
      {1, 16, 8, 128, true}, {3, 16, 8, 128, false}, {7, 8, 2, 64, true},
      {2, 8, 2, 64, false},  {5, 4, 2, 32, true},    {1, 4, 2, 32, false},
  };
  const int64_t cache_rows = 64;
  for (DType dt : {DType::kBF16, DType::kF16, DType::kF32}) {
    for (const InputsCase& ic : cases) {
      SCOPED_TRACE(::testing::Message() << DTypeName(dt) << " T " << ic.tokens << " heads " << ic.hq
                                        << "/" << ic.hkv << " D " << ic.dim << " norm " << ic.norm);
      const int64_t qw = static_cast<int64_t>(ic.hq) * ic.dim;
      const int64_t kw = static_cast<int64_t>(ic.hkv) * ic.dim;
      const int64_t cols = qw + 2 * kw;
      const auto qkv = Random(ic.tokens * cols, 90, -2.f, 2.f);
      const auto cache0 = Random(cache_rows * kw, 91, -1.f, 1.f);
      std::vector<int32_t> pos(ic.tokens), slots(ic.tokens);
      std::vector<int32_t> rows(cache_rows);
      std::iota(rows.begin(), rows.end(), 0);
      std::shuffle(rows.begin(), rows.end(), std::mt19937(5));
      for (int64_t t = 0; t < ic.tokens; ++t) {
        pos[t] = static_cast<int32_t>((t * 397 + 11) % 1000);
        slots[t] = rows[t];
      }
      Tensor gpos = I32(pos), gslots = I32(slots);
      Tensor qn = Make(Random(ic.dim, 92, 0.5f, 1.5f), 1, ic.dim, DType::kF32);
      Tensor kn = Make(Random(ic.dim, 93, 0.5f, 1.5f), 1, ic.dim, DType::kF32);
      std::vector<float> q_out[2], kc_out[2], vc_out[2], k_region[2];
      for (int fused = 0; fused < 2; ++fused) {
        Tensor x = Make(qkv, ic.tokens, cols, dt);
        Tensor kc = Make(cache0, cache_rows, kw, dt);
        Tensor vc = Make(cache0, cache_rows, kw, dt);
        AttentionInputParams p;
        p.q_rope.x = x.ColSlice(0, qw);
        p.q_rope.positions = gpos.ptr<int32_t>();
        p.q_rope.num_heads = ic.hq;
        p.q_rope.head_dim = ic.dim;
        p.q_rope.rotary_dim = ic.dim;
        p.q_rope.theta = 1e6;
        p.q_rope.max_position = 1024;
        p.k = x.ColSlice(qw, kw);
        p.q_norm = ic.norm ? &qn : nullptr;
        p.k_norm = ic.norm ? &kn : nullptr;
        p.eps = 1e-6f;
        p.num_kv_heads = ic.hkv;
        p.kv = {p.k, x.ColSlice(qw + kw, kw), kc, vc, gslots.ptr<int32_t>()};
        if (fused) {
          gpu_->AttentionInputs(p);
        } else {
          gpu_->Backend::AttentionInputs(p);
        }
        q_out[fused] = Get(p.q_rope.x);
        k_region[fused] = Get(p.k);
        kc_out[fused] = Get(kc);
        vc_out[fused] = Get(vc);
      }
      // The fused kernel writes k only to the cache; the unfused path rotates it in place.
      const auto k_in = [&] {
        Tensor x = Make(qkv, ic.tokens, cols, dt);
        return Get(x.ColSlice(qw, kw));
      }();
      EXPECT_TRUE(Identical(k_region[1], k_in)) << "the fused kernel did not run";
      EXPECT_FALSE(Identical(k_region[0], k_in));
      EXPECT_TRUE(Identical(vc_out[1], vc_out[0]));
      if (ic.norm) {  // QkNormRope's arithmetic exactly
        EXPECT_TRUE(Identical(q_out[1], q_out[0]));
        EXPECT_TRUE(Identical(kc_out[1], kc_out[0]));
      } else {  // the same rotation as the Rope kernel, up to the contraction of one product
        const double ulp = dt == DType::kBF16 ? 1.0 / 128 : dt == DType::kF16 ? 1.0 / 1024 : 2e-7;
        EXPECT_NEAR_ALL(q_out[1], q_out[0], 1e-6, ulp);
        EXPECT_NEAR_ALL(kc_out[1], kc_out[0], 1e-6, ulp);
      }
    }
  }
}

}  // namespace
}  // namespace sluice
