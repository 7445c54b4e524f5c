// Highway kernels vs the scalar reference (src/backend/cpu/reference.cc).
// Tolerances (f32 activations, reference in double): element-wise and norms atol 2e-6 /
// rtol 2e-6 (erf/tanh/exp approximations are a few ulp); RoPE atol 2e-6 on O(1) values;
// copies, gathers and CLS/LAST/MAX pooling exact.
#include <cstring>

#include "backend/cpu/reference.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::MakeCpu;
using testing::Random;
using testing::View;

constexpr int64_t kRows[] = {1, 3, 17, 129};
constexpr int64_t kCols[] = {7, 64, 100, 384};

TEST(CpuKernels, Activate) {
  auto be = MakeCpu();
  for (auto act : {Activation::kGeluErf, Activation::kGeluTanh, Activation::kSilu,
                   Activation::kRelu, Activation::kQuickGelu, Activation::kNone}) {
    for (int64_t rows : kRows) {
      for (int64_t cols : kCols) {
        const int64_t ld = cols + 3;  // strided view
        auto x = Random(rows * ld, 1, -8.f, 8.f);
        auto y = x;
        be->Activate(View(x, rows, cols, ld), act);
        cpu::ref::Activate(View(y, rows, cols, ld), act);
        EXPECT_CLOSE(x.data(), y.data(), x.size(), 2e-6, 2e-6)
            << "act " << static_cast<int>(act) << " " << rows << "x" << cols;
      }
    }
  }
  // Extreme inputs stay finite and correct in sign.
  std::vector<float> e = {-1000.f, -100.f, -88.f, 100.f, 1000.f};
  auto r = e;
  be->Activate(View(e, 1, 5), Activation::kSilu);
  cpu::ref::Activate(View(r, 1, 5), Activation::kSilu);
  EXPECT_CLOSE(e.data(), r.data(), e.size(), 1e-6, 1e-6);
}

TEST(CpuKernels, GatedActivateAndAdd) {
  auto be = MakeCpu();
  for (auto act : {Activation::kGeluErf, Activation::kGeluTanh, Activation::kSilu}) {
    for (int64_t rows : kRows) {
      for (int64_t cols : kCols) {
        auto gu = Random(rows * 2 * cols, 2, -6.f, 6.f);
        std::vector<float> o(rows * cols), r(rows * cols);
        be->GatedActivate(View(gu, rows, 2 * cols), act, View(o, rows, cols));
        cpu::ref::GatedActivate(View(gu, rows, 2 * cols), act, View(r, rows, cols));
        EXPECT_CLOSE(o.data(), r.data(), o.size(), 1e-5, 2e-6) << rows << "x" << cols;
      }
    }
  }
  for (int64_t cols : kCols) {
    auto a = Random(17 * cols, 3), b = Random(17 * cols, 4);
    std::vector<float> r(17 * cols);
    cpu::ref::Add(View(a, 17, cols), View(b, 17, cols), View(r, 17, cols));
    be->Add(View(a, 17, cols), View(b, 17, cols), View(a, 17, cols));  // out aliases a
    EXPECT_EQ(0, std::memcmp(a.data(), r.data(), r.size() * 4));
  }
}

TEST(CpuKernels, LayerNorm) {
  auto be = MakeCpu();
  for (int64_t rows : kRows) {
    for (int64_t cols : kCols) {
      auto x = Random(rows * cols, 5, -3.f, 5.f), res = Random(rows * cols, 6);
      auto g = Random(cols, 7), b = Random(cols, 8);
      Tensor gt = View(g, 1, cols), bt = View(b, 1, cols);
      for (int variant = 0; variant < 3; ++variant) {
        std::vector<float> o(rows * cols), r(rows * cols);
        Tensor rt = View(res, rows, cols);
        const Tensor* rp = variant == 0 ? nullptr : &rt;
        const Tensor* bp = variant == 1 ? nullptr : &bt;
        cpu::ref::LayerNorm(View(x, rows, cols), rp, gt, bp, 1e-5f, View(r, rows, cols));
        if (variant == 2) {  // out aliases x
          o = x;
          be->LayerNorm(View(o, rows, cols), rp, gt, bp, 1e-5f, View(o, rows, cols));
        } else {
          be->LayerNorm(View(x, rows, cols), rp, gt, bp, 1e-5f, View(o, rows, cols));
        }
        EXPECT_CLOSE(o.data(), r.data(), o.size(), 2e-6, 2e-6)
            << "variant " << variant << " " << rows << "x" << cols;
      }
    }
  }
}

TEST(CpuKernels, RmsNorm) {
  auto be = MakeCpu();
  for (int64_t rows : kRows) {
    for (int64_t cols : {64, 100, 384}) {
      for (int group : {0, cols == 100 ? 20 : 32}) {
        const int64_t wn = group > 0 ? group : cols;
        auto w = Random(wn, 9);
        auto delta = Random(rows * cols, 10);
        // With delta: residual updated in place, out separate.
        auto res1 = Random(rows * cols, 11, -4.f, 4.f), res2 = res1;
        std::vector<float> o1(rows * cols), o2(rows * cols);
        Tensor d = View(delta, rows, cols);
        be->RmsNorm(View(res1, rows, cols), &d, View(w, 1, wn), 1e-6f, View(o1, rows, cols), group);
        cpu::ref::RmsNorm(View(res2, rows, cols), &d, View(w, 1, wn), 1e-6f, View(o2, rows, cols),
                          group);
        EXPECT_EQ(0, std::memcmp(res1.data(), res2.data(), res1.size() * 4));
        EXPECT_CLOSE(o1.data(), o2.data(), o1.size(), 2e-6, 2e-6) << rows << "x" << cols;
        // Without delta, out aliases residual.
        be->RmsNorm(View(res1, rows, cols), nullptr, View(w, 1, wn), 1e-6f, View(res1, rows, cols),
                    group);
        cpu::ref::RmsNorm(View(res2, rows, cols), nullptr, View(w, 1, wn), 1e-6f,
                          View(res2, rows, cols), group);
        EXPECT_CLOSE(res1.data(), res2.data(), res1.size(), 2e-6, 2e-6);
      }
    }
  }
}

TEST(CpuKernels, Rope) {
  auto be = MakeCpu();
  struct Case {
    int heads, head_dim, rotary_dim;
    double theta;
    RopeStyle style;
  };
  for (const Case& c :
       {Case{4, 64, 64, 10000.0, RopeStyle::kNeox}, Case{2, 128, 128, 1000000.0, RopeStyle::kNeox},
        Case{3, 80, 40, 10000.0, RopeStyle::kNeox},
        Case{2, 64, 64, 10000.0, RopeStyle::kInterleaved},
        Case{2, 96, 32, 500000.0, RopeStyle::kInterleaved}}) {
    for (int64_t tokens : {1, 17, 129}) {
      const int64_t cols = static_cast<int64_t>(c.heads) * c.head_dim, ld = cols + 16;
      auto x = Random(tokens * ld, 12), y = x;
      std::vector<int32_t> pos(tokens);
      for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>((t * 977) % 8192);
      RopeParams p{View(x, tokens, cols, ld),
                   pos.data(),
                   c.heads,
                   c.head_dim,
                   c.rotary_dim,
                   c.theta,
                   c.style};
      be->Rope(p);
      p.x = View(y, tokens, cols, ld);
      cpu::ref::Rope(p);
      EXPECT_CLOSE(x.data(), y.data(), x.size(), 2e-6, 0.0)
          << "head_dim " << c.head_dim << " tokens " << tokens;
    }
  }
}

// bf16 activations (InnerActivationDType): Rope on bf16 rows, GatedActivate from / to bf16
// and LayerNorm into bf16 give, bit for bit, the f32 kernel's result on the widened values,
// rounded once (strided views, odd widths, GELU and SiLU).
TEST(CpuKernels, Bf16RowsAreTheF32KernelRounded) {
  auto be = MakeCpu();
  for (int64_t tokens : {1, 17, 130}) {
    // Rope, neox and interleaved, partial rotary dims, a strided view.
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
      const int heads = 3, dim = 80;
      const int64_t cols = heads * dim, ld = cols + 16;
      auto x16 = testing::ToBf16(Random(tokens * ld, 51));
      auto xf = testing::FromBf16(x16);
      std::vector<int32_t> pos(tokens);
      for (int64_t t = 0; t < tokens; ++t) pos[t] = static_cast<int32_t>((t * 977) % 8192);
      RopeParams p{View(xf, tokens, cols, ld), pos.data(), heads, dim, 40, 10000.0, style};
      be->Rope(p);
      p.x = Tensor{x16.data(), DType::kBF16, tokens, cols, ld};
      be->Rope(p);
      EXPECT_EQ(testing::ToBf16(xf), x16) << "rope tokens " << tokens;
    }
    // GatedActivate: bf16 -> bf16, bf16 -> f32, f32 -> bf16.
    for (Activation act : {Activation::kGeluErf, Activation::kSilu}) {
      const int64_t n = 77;
      auto g16 = testing::ToBf16(Random(tokens * 2 * n, 52, -4.f, 4.f));
      auto gf = testing::FromBf16(g16);
      std::vector<float> of(tokens * n), o32(tokens * n);
      std::vector<uint16_t> o16(tokens * n), o16b(tokens * n);
      be->GatedActivate(View(gf, tokens, 2 * n), act, View(of, tokens, n));
      const Tensor g16t{g16.data(), DType::kBF16, tokens, 2 * n, 0};
      be->GatedActivate(g16t, act, Tensor{o16.data(), DType::kBF16, tokens, n, 0});
      be->GatedActivate(g16t, act, View(o32, tokens, n));
      be->GatedActivate(View(gf, tokens, 2 * n), act,
                        Tensor{o16b.data(), DType::kBF16, tokens, n, 0});
      EXPECT_EQ(testing::ToBf16(of), o16) << "gated tokens " << tokens;
      EXPECT_EQ(of, o32) << "gated bf16 -> f32, tokens " << tokens;
      EXPECT_EQ(testing::ToBf16(of), o16b) << "gated f32 -> bf16, tokens " << tokens;
    }
    // LayerNorm of f32 rows (with a residual) into bf16.
    const int64_t h = 100;
    auto x = Random(tokens * h, 53), r = Random(tokens * h, 54), gam = Random(h, 55),
         bet = Random(h, 56);
    std::vector<float> of(tokens * h);
    std::vector<uint16_t> o16(tokens * h);
    const Tensor rt = View(r, tokens, h), bt = View(bet, 1, h);
    be->LayerNorm(View(x, tokens, h), &rt, View(gam, 1, h), &bt, 1e-5f, View(of, tokens, h));
    be->LayerNorm(View(x, tokens, h), &rt, View(gam, 1, h), &bt, 1e-5f,
                  Tensor{o16.data(), DType::kBF16, tokens, h, 0});
    EXPECT_EQ(testing::ToBf16(of), o16) << "layernorm tokens " << tokens;
  }
}

TEST(CpuKernels, EmbeddingGatherAllDtypes) {
  auto be = MakeCpu();
  const int64_t vocab = 50, h = 100, n = 17;
  auto tf = Random(vocab * h, 13);
  std::vector<uint16_t> tb(tf.size()), th(tf.size());
  for (size_t i = 0; i < tf.size(); ++i) {
    tb[i] = F32ToBF16(tf[i]);
    th[i] = F32ToF16(tf[i]);
  }
  std::vector<int32_t> ids(n);
  for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    void* data = dt == DType::kF32    ? static_cast<void*>(tf.data())
                 : dt == DType::kBF16 ? static_cast<void*>(tb.data())
                                      : static_cast<void*>(th.data());
    Tensor table{data, dt, vocab, h, 0};
    for (bool acc : {false, true}) {
      auto o = Random(n * h, 14), r = o;
      be->EmbeddingGather(table, ids.data(), n, View(o, n, h), acc);
      cpu::ref::EmbeddingGather(table, ids.data(), n, View(r, n, h), acc);
      EXPECT_EQ(0, std::memcmp(o.data(), r.data(), o.size() * 4)) << DTypeName(dt) << acc;
    }
  }
}

TEST(CpuKernels, GatherRowsAndPool) {
  auto be = MakeCpu();
  const int64_t h = 100;
  std::vector<int32_t> cu = {0, 1, 1, 18, 147, 150};  // includes an empty sequence
  const int ns = 5, tokens = 150;
  auto hid = Random(tokens * h, 15);
  for (auto mode : {PoolMode::kCls, PoolMode::kMean, PoolMode::kLast, PoolMode::kMax}) {
    std::vector<float> o(ns * h, 7.f), r(ns * h, 9.f);
    PoolParams p{View(hid, tokens, h), View(o, ns, h), cu.data(), ns, mode};
    be->Pool(p);
    p.out = View(r, ns, h);
    cpu::ref::Pool(p);
    EXPECT_CLOSE(o.data(), r.data(), o.size(), 1e-6, 1e-6) << static_cast<int>(mode);
  }
  std::vector<int32_t> rows = {149, 0, 17, 17, 3};
  std::vector<float> o(5 * 64), r(5 * 64);
  Tensor x = View(hid, tokens, 64, h);  // strided column view
  be->GatherRows(x, rows.data(), 5, View(o, 5, 64));
  cpu::ref::GatherRows(x, rows.data(), 5, View(r, 5, 64));
  EXPECT_EQ(0, std::memcmp(o.data(), r.data(), o.size() * 4));
}

TEST(CpuKernels, UploadAndCopies) {
  auto be = MakeCpu();
  auto f = Random(3 * 40, 16);
  std::vector<uint16_t> b(f.size());
  for (size_t i = 0; i < f.size(); ++i) b[i] = F32ToBF16(f[i]);
  HostTensor hb{b.data(), DType::kBF16, {3, 4, 10}, "t"};
  auto up = be->Upload(hb, DType::kF32);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ(up->t().rows, 3);
  EXPECT_EQ(up->t().cols, 40);
  std::vector<float> out(120);
  be->CopyToHostF32(up->t(), out.data());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], BF16ToF32(b[i]));
  HostTensor hf{f.data(), DType::kF32, {120}, "v"};
  auto upb = be->Upload(hf, DType::kBF16);
  ASSERT_TRUE(upb.ok());
  EXPECT_EQ(upb->t().rows, 1);
  be->CopyToHostF32(upb->t(), out.data());
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], BF16ToF32(F32ToBF16(f[i])));
  HostTensor hi{f.data(), DType::kI32, {120}, "ids"};
  EXPECT_FALSE(be->Upload(hi, DType::kF32).ok());
  // Strided CopyFromHost / CopyToHostF32.
  Buffer buf = be->Allocate(DType::kF32, 3, 50);
  std::vector<float> src = Random(3 * 20, 17), back(3 * 20);
  Tensor view = buf.t().ColSlice(5, 20);
  be->CopyFromHost(src.data(), view);
  be->CopyToHostF32(view, back.data());
  EXPECT_EQ(src, back);
}

// Row-wise kernels: a row alone gives bit-identical results to the same row in a batch,
// with 1 or 2 threads.
TEST(CpuKernels, BatchInvariance) {
  const int64_t rows = 129, cols = 384, probe = 77;
  auto x = Random(rows * cols, 61, -3.f, 3.f), g = Random(cols, 62), b = Random(cols, 63);
  Tensor gt = View(g, 1, cols), bt = View(b, 1, cols);
  std::vector<int32_t> pos(rows);
  for (int64_t t = 0; t < rows; ++t) pos[t] = static_cast<int32_t>(t * 13);
  for (int threads : {1, 2}) {
    auto be = MakeCpu(threads);
    std::vector<float> batch(rows * cols), alone(cols);
    std::vector<float> xp(x.begin() + probe * cols, x.begin() + (probe + 1) * cols);
    be->LayerNorm(View(x, rows, cols), nullptr, gt, &bt, 1e-12f, View(batch, rows, cols));
    be->LayerNorm(View(xp, 1, cols), nullptr, gt, &bt, 1e-12f, View(alone, 1, cols));
    EXPECT_EQ(0, std::memcmp(batch.data() + probe * cols, alone.data(), cols * 4));
    auto xb = x, xa = xp;
    be->RmsNorm(View(xb, rows, cols), nullptr, gt, 1e-6f, View(batch, rows, cols), 64);
    be->RmsNorm(View(xa, 1, cols), nullptr, gt, 1e-6f, View(alone, 1, cols), 64);
    EXPECT_EQ(0, std::memcmp(batch.data() + probe * cols, alone.data(), cols * 4));
    xb = x;
    xa = xp;
    RopeParams p{View(xb, rows, cols), pos.data(), 6, 64, 64, 1e6, RopeStyle::kNeox};
    be->Rope(p);
    p.x = View(xa, 1, cols);
    p.positions = pos.data() + probe;
    be->Rope(p);
    EXPECT_EQ(0, std::memcmp(xb.data() + probe * cols, xa.data(), cols * 4));
    xb = x;
    xa = xp;
    be->Activate(View(xb, rows, cols), Activation::kGeluErf);
    be->Activate(View(xa, 1, cols), Activation::kGeluErf);
    EXPECT_EQ(0, std::memcmp(xb.data() + probe * cols, xa.data(), cols * 4));
  }
}

}  // namespace
}  // namespace sluice
