// Per-op timing of one Qwen3-0.6B-shaped decoder layer (hidden 1024, 16 heads, 8 KV
// heads, head_dim 128, intermediate 3072; bf16 weights) on a packed batch with the rerank
// workload's mean length (~141 tokens). Not a correctness test: it runs only when
// SLUICE_CUDA_BENCH=1 and prints where a forward's time goes, as the baseline for the
// performance work of issue 5.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "backend/backend.h"

namespace sluice {
namespace {

TEST(CudaLayerBench, Qwen3Layer) {
  if (std::getenv("SLUICE_CUDA_BENCH") == nullptr) GTEST_SKIP() << "set SLUICE_CUDA_BENCH=1";
  auto g = CreateBackend(BackendOptions{DeviceKind::kCuda, 0, 0});
  if (!g.ok()) GTEST_SKIP() << g.status().ToString();
  Backend& be = **g;
  const int64_t H = 1024, I = 3072, D = 128, Hq = 16, Hkv = 8, L = 28;
  const int64_t QKV = (Hq + 2 * Hkv) * D;
  std::mt19937 rng(1);
  std::vector<int32_t> cu = {0};
  int maxlen = 0;
  for (int s = 0; s < 256; ++s) {
    const int len = 60 + static_cast<int>(rng() % 163);  // mean ~141
    cu.push_back(cu.back() + len);
    maxlen = std::max(maxlen, len);
  }
  const int64_t T = cu.back(), S = static_cast<int64_t>(cu.size()) - 1;
  std::vector<Buffer> keep;
  auto alloc = [&](DType dt, int64_t r, int64_t c) {
    keep.push_back(be.Allocate(dt, r, c));
    return keep.back().t();
  };
  auto upload = [&](const std::vector<int32_t>& v) {
    Tensor t = alloc(DType::kI32, 1, static_cast<int64_t>(v.size()));
    be.CopyFromHost(v.data(), t);
    return t;
  };
  auto weight = [&](int64_t n, int64_t k) {
    std::vector<float> w(n * k);
    std::normal_distribution<float> nd(0.f, 0.02f);
    for (auto& x : w) x = nd(rng);
    HostTensor h{w.data(), DType::kF32, {n, k}, "w"};
    auto lw = be.PrepareLinear(h, nullptr, DType::kBF16);
    EXPECT_TRUE(lw.ok());
    return std::move(lw).value();
  };
  auto ones = [&](int64_t n) {
    std::vector<float> v(n, 1.f);
    Tensor t = alloc(DType::kF32, 1, n);
    be.CopyFromHost(v.data(), t);
    return t;
  };
  auto wqkv = weight(QKV, H), wo = weight(H, Hq * D), wgu = weight(2 * I, H), wd = weight(H, I);
  Tensor norm = ones(H), qn = ones(D);
  std::vector<int32_t> pos(T);
  for (int64_t s = 0; s < S; ++s) {
    for (int32_t i = cu[s]; i < cu[s + 1]; ++i) pos[i] = i - cu[s];
  }
  Tensor tcu = upload(cu), tpos = upload(pos);
  // The model's dataflow (src/models/qwen3.cc): f32 residual stream, activations in the
  // backend's activation dtype (bf16 next to bf16 weights).
  const DType A = be.ActivationDType(DType::kBF16);
  Tensor res = alloc(DType::kF32, T, H), x = alloc(A, T, H);
  Tensor qkv = alloc(A, T, QKV), attn = alloc(A, T, Hq * D);
  Tensor gu = alloc(A, T, 2 * I);
  Tensor act = alloc(A, T, I);
  {
    std::vector<float> r(T * H);
    std::normal_distribution<float> nd(0.f, 1.f);
    for (auto& v : r) v = nd(rng);
    be.CopyFromHost(r.data(), res);
  }
  Tensor q = qkv.ColSlice(0, Hq * D), k = qkv.ColSlice(Hq * D, Hkv * D);
  Tensor v = qkv.ColSlice((Hq + Hkv) * D, Hkv * D);
  AttentionParams ap;
  ap.q = q;
  ap.k = k;
  ap.v = v;
  ap.out = attn;
  ap.cu_seqlens = tcu.ptr<int32_t>();
  ap.num_seqs = static_cast<int>(S);
  ap.max_seqlen = maxlen;
  ap.num_heads = static_cast<int>(Hq);
  ap.num_kv_heads = static_cast<int>(Hkv);
  ap.head_dim = static_cast<int>(D);
  ap.scale = 1.f / std::sqrt(static_cast<float>(D));
  ap.causal = true;
  RopeParams rp;
  rp.positions = tpos.ptr<int32_t>();
  rp.head_dim = rp.rotary_dim = static_cast<int>(D);
  rp.theta = 1e6;
  rp.max_position = maxlen;

  struct Op {
    const char* name;
    double flops;
    std::function<void()> fn;
  };
  double attn_flops = 0;
  for (int64_t s = 0; s < S; ++s) {
    const double l = cu[s + 1] - cu[s];
    attn_flops += 2.0 * 2.0 * Hq * D * l * (l + 1) / 2;  // QK^T and PV, causal half
  }
  const std::vector<Op> ops = {
      {"rmsnorm", 0, [&] { be.RmsNorm(res, nullptr, norm, 1e-6f, x); }},
      {"linear qkv", 2.0 * T * H * QKV,
       [&] {
         be.Linear({wqkv.get(), x, qkv});
       }},
      {"qk-norm+rope", 0,
       [&] {
         rp.x = q;
         rp.num_heads = static_cast<int>(Hq);
         be.QkNormRope(rp, qn, 1e-6f);
         rp.x = k;
         rp.num_heads = static_cast<int>(Hkv);
         be.QkNormRope(rp, qn, 1e-6f);
       }},
      {"attention", attn_flops, [&] { be.Attention(ap); }},
      {"linear o", 2.0 * T * Hq * D * H,
       [&] {
         be.Linear({wo.get(), attn, res, Activation::kNone, &res});
       }},
      {"rmsnorm", 0, [&] { be.RmsNorm(res, nullptr, norm, 1e-6f, x); }},
      {"linear gate_up", 2.0 * T * H * 2 * I,
       [&] {
         be.Linear({wgu.get(), x, gu});
       }},
      {"swiglu", 0, [&] { be.GatedActivate(gu, Activation::kSilu, act); }},
      {"linear down", 2.0 * T * I * H,
       [&] {
         be.Linear({wd.get(), act, res, Activation::kNone, &res});
       }},
  };
  double layer_ms = 0;
  std::printf(
      "[ bench ] %ld sequences, %ld tokens (mean %.1f), one layer, bf16 weights, %s "
      "activations\n",
      static_cast<long>(S), static_cast<long>(T), double(T) / S, DTypeName(A));
  for (const auto& op : ops) {
    op.fn();  // warm-up (plans, lazy module loading)
    be.Synchronize();
    const int reps = 10;
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) op.fn();
    be.Synchronize();
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() /
        reps;
    layer_ms += ms;
    std::printf("[ bench ] %-15s %8.3f ms", op.name, ms);
    if (op.flops > 0) std::printf("  %7.1f TFLOP/s", op.flops / ms / 1e9);
    std::printf("\n");
  }
  const double fwd_ms = layer_ms * L;
  std::printf("[ bench ] layer %.3f ms; %ld layers %.1f ms -> %.0f sequences/s (stack only)\n",
              layer_ms, static_cast<long>(L), fwd_ms, S / (fwd_ms / 1e3));
}

}  // namespace
}  // namespace sluice
