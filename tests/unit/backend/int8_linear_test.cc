// int8 Linear (gemm_x86.h): per-channel int8 weights, dynamic per-token int8 activations.
// Checked against a double-precision reference built from the same quantised integers
// (tight: only f32 rounding of the epilogue), against fp32 (loose: quantisation error),
// for batch/thread invariance (bit for bit), and VNNI vs portable kernel (bit for bit).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/gemm_x86.h"
#include "backend/cpu/reference.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::MakeCpu;
using testing::Random;
using testing::View;

// Symmetric int8 of v (max |v| / 127, round to nearest even), dequantised.
std::vector<double> Dequant(const float* v, int64_t n) {
  float amax = 0.f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(v[i]));
  const float inv = amax > 0.f ? 127.f / amax : 0.f, s = amax / 127.f;
  std::vector<double> out(n);
  for (int64_t i = 0; i < n; ++i) {
    const float q = std::clamp(std::nearbyint(v[i] * inv), -127.f, 127.f);
    out[i] = static_cast<double>(q) * s;
  }
  return out;
}

struct Case {
  int64_t m, k, n;
  Activation act;
  bool residual;
};

void CheckInt8(Backend& be, const Case& c) {
  auto w = Random(c.n * c.k, 61), b = Random(c.n, 62);
  HostTensor hw{w.data(), DType::kF32, {c.n, c.k}, "w"};
  HostTensor hb{b.data(), DType::kF32, {c.n}, "b"};
  auto lw = be.PrepareLinear(hw, &hb, DType::kI8);
  ASSERT_TRUE(lw.ok()) << lw.status().ToString();
  const int64_t ldx = c.k + 3, ldo = c.n + 1;
  auto x = Random(c.m * ldx, 63, -2.f, 2.f), res = Random(c.m * c.n, 64);
  std::vector<float> out(c.m * ldo, 0.f);
  Tensor rt = View(res, c.m, c.n);
  be.Linear(LinearParams{lw->get(), View(x, c.m, c.k, ldx), View(out, c.m, c.n, ldo), c.act,
                         c.residual ? &rt : nullptr});
  // Reference 1: the quantised x and w, in double.
  std::vector<std::vector<double>> wq(c.n);
  for (int64_t j = 0; j < c.n; ++j) wq[j] = Dequant(w.data() + j * c.k, c.k);
  std::vector<float> xq(c.m * c.k), wqf(c.n * c.k), xf(c.m * c.k), ref(c.m * c.n), ref32(c.m * c.n),
      got(c.m * c.n);
  for (int64_t r = 0; r < c.m; ++r) {
    auto d = Dequant(x.data() + r * ldx, c.k);
    for (int64_t i = 0; i < c.k; ++i) {
      xq[r * c.k + i] = static_cast<float>(d[i]);
      xf[r * c.k + i] = x[r * ldx + i];
    }
    std::memcpy(got.data() + r * c.n, out.data() + r * ldo, c.n * 4);
  }
  for (int64_t j = 0; j < c.n; ++j) {
    for (int64_t i = 0; i < c.k; ++i) wqf[j * c.k + i] = static_cast<float>(wq[j][i]);
  }
  // (The dequantised values rounded to f32 are within 2^-24 relative: far below the bound.)
  cpu::ref::Linear(xq.data(), c.m, c.k, wqf.data(), b.data(), c.n, c.act,
                   c.residual ? res.data() : nullptr, ref.data());
  EXPECT_CLOSE(got.data(), ref.data(), got.size(), 1e-5 * std::sqrt(double(c.k)), 1e-5)
      << "vs quantised reference, m=" << c.m << " k=" << c.k << " n=" << c.n;
  // Reference 2: fp32. Quantisation error of a dot product of K terms of |x| <= 2, |w| <= 1:
  // about sqrt(K) * (2/127 + 1/127) / sqrt(12) * ... ; bound it by 0.02 * sqrt(K).
  cpu::ref::Linear(xf.data(), c.m, c.k, w.data(), b.data(), c.n, c.act,
                   c.residual ? res.data() : nullptr, ref32.data());
  EXPECT_LE(testing::MaxAbsDiff(got.data(), ref32.data(), got.size()),
            0.02 * std::sqrt(double(c.k)))
      << "vs fp32, m=" << c.m << " k=" << c.k << " n=" << c.n;
}

TEST(Int8Linear, MatchesQuantisedReference) {
  auto be = MakeCpu();
  for (int64_t m : {1, 5, 6, 7, 50}) {
    for (int64_t k : {3, 4, 64, 101, 384}) {
      for (int64_t n : {1, 63, 64, 100}) CheckInt8(*be, {m, k, n, Activation::kNone, false});
    }
  }
  for (auto act : {Activation::kGeluErf, Activation::kGeluTanh, Activation::kSilu}) {
    CheckInt8(*be, {33, 96, 70, act, false});
    CheckInt8(*be, {33, 96, 70, act, true});
  }
  CheckInt8(*be, {700, 768, 130, Activation::kGeluErf, true});
}

// Runs a [m, k] x [n, k] int8 Linear with the given ISA cap (the kernel is chosen per call)
// and SLUICE_CPU_LINEAR mode ("" = the environment's).
std::vector<float> RunInt8(const std::string& cap, int threads, const std::vector<float>& w,
                           const std::vector<float>& x, int64_t m, int64_t k, int64_t n,
                           const std::string& mode = "") {
  cpu::SetMaxIsaForTesting(cap);
  cpu::LinearRunner::SetPathForTesting(mode);
  auto be = MakeCpu(threads);
  HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
  auto lw = be->PrepareLinear(hw, nullptr, DType::kI8);
  cpu::LinearRunner::SetPathForTesting("");
  EXPECT_TRUE(lw.ok()) << lw.status().ToString();
  if (!lw.ok()) return {};
  std::vector<float> out(m * n), xc = x;
  be->Linear(LinearParams{lw->get(), View(xc, m, k), View(out, m, n), Activation::kGeluErf});
  cpu::SetMaxIsaForTesting("");
  return out;
}

// The VNNI kernel and the portable one compute the same integers: identical outputs.
TEST(Int8Linear, VnniMatchesPortableBitForBit) {
  if (!cpu::Features().avx512_vnni) GTEST_SKIP() << "no AVX512-VNNI on this CPU";
  const int64_t m = 37, k = 203, n = 150;
  auto w = Random(n * k, 71), x = Random(m * k, 72, -3.f, 3.f);
  cpu::SetMaxIsaForTesting("avx2");
  EXPECT_STREQ(cpu::x86::I8KernelName(), "portable");
  cpu::SetMaxIsaForTesting("");
  EXPECT_STREQ(cpu::x86::I8KernelName(), "avx512_vnni");
  // The epilogue runs on Highway's target either way, so outputs are bit-identical.
  auto a = RunInt8("", 2, w, x, m, k, n), b = RunInt8("avx2", 2, w, x, m, k, n);
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * 4));
}

// sluice's AMX int8 GEMM (SLUICE_CPU_LINEAR=amx) computes the same integers as VNNI (and
// the same epilogue): identical outputs, through Backend::Linear. Needs AMX-INT8.
// The AVX-512 activation quantisation gives the scalar loop's bytes and scales bit for bit:
// row lengths with tails, an all-zero row, halves that round to even after scaling, a NaN
// (ignored by the max, quantised to -127), signed zeros and huge values.
TEST(Int8Linear, QuantizeSimdMatchesScalarBitForBit) {
  if (!cpu::Features().avx512) GTEST_SKIP() << "no AVX-512 here";
  for (int64_t k : {1, 15, 16, 17, 64, 100, 384, 1537}) {
    const int64_t m = 7, ld = 4 * cpu::x86::KQuads(k);
    std::vector<float> x = Random(m * k, static_cast<uint32_t>(k), -3.f, 3.f);
    for (int64_t c = 0; c < k; ++c) x[c] = 0.f;  // row 0: zeros -> scale 0, all 128
    if (k >= 4) {
      // row 1: amax 127, so x * inv = x: exact halves that round to even
      x[k] = 127.f;
      x[k + 1] = 2.5f;
      x[k + 2] = -3.5f;
      x[k + 3] = -0.f;
    }
    x[2 * k] = std::nanf("");  // row 2: a NaN
    x[3 * k + k / 2] = 1e30f;  // row 3: one huge value
    std::vector<uint8_t> simd(m * ld, 7), scalar(m * ld, 9);
    std::vector<float> s_simd(m, -1.f), s_scalar(m, -2.f);
    cpu::x86::QuantizeI8(x.data(), k, m, k, simd.data(), s_simd.data());
    cpu::SetMaxIsaForTesting("avx2");
    ASSERT_FALSE(cpu::Features().avx512);
    cpu::x86::QuantizeI8(x.data(), k, m, k, scalar.data(), s_scalar.data());
    cpu::SetMaxIsaForTesting("");
    EXPECT_EQ(0, std::memcmp(simd.data(), scalar.data(), simd.size())) << "k=" << k;
    EXPECT_EQ(0, std::memcmp(s_simd.data(), s_scalar.data(), m * sizeof(float))) << "k=" << k;
    if (k >= 4) {
      EXPECT_EQ(scalar[ld + 1], 128 + 2);  // 2.5 -> 2
      EXPECT_EQ(scalar[ld + 2], 128 - 4);  // -3.5 -> -4
    }
    EXPECT_EQ(scalar[2 * ld], 128 - 127);  // NaN
  }
}

TEST(Int8Linear, AmxMatchesVnniBitForBit) {
  if (!cpu::x86::AmxI8Usable()) {
    GTEST_SKIP() << "AMX-INT8 not usable here (" << cpu::FeatureSummary()
                 << "): run on an AMX machine";
  }
  for (auto [m, k, n] : {std::array<int64_t, 3>{1, 3, 1},
                         {15, 64, 63},
                         {17, 203, 150},
                         {300, 1024, 200},
                         {33, 3072, 768}}) {
    auto w = Random(n * k, 73), x = Random(m * k, 74, -3.f, 3.f);
    auto amx = RunInt8("", 2, w, x, m, k, n, "amx");  // the default: A tiles
    cpu::x86::SetAmxI8TiledAForTesting(false);        // activations in rows
    auto amx_rows = RunInt8("", 2, w, x, m, k, n, "amx");
    cpu::x86::ResetAmxI8TiledAForTesting();
    auto vnni = RunInt8("avx512_bf16", 2, w, x, m, k, n);  // cap below AMX: VNNI
    ASSERT_EQ(amx.size(), vnni.size());
    EXPECT_EQ(0, std::memcmp(amx.data(), vnni.data(), amx.size() * 4))
        << "m=" << m << " k=" << k << " n=" << n;
    EXPECT_EQ(0, std::memcmp(amx_rows.data(), vnni.data(), amx.size() * 4))
        << "rows m=" << m << " k=" << k << " n=" << n;
  }
}

// A row's result does not depend on M, on its position or on the thread count (on the
// default path: sluice's AMX int8 GEMM where usable, else VNNI or portable).
TEST(Int8Linear, BatchAndThreadInvariance) {
  const int64_t k = 384, n = 200;
  auto w = Random(n * k, 81);
  auto probe = Random(k, 82);
  auto alone = RunInt8("", 2, w, probe, 1, k, n);
  for (int64_t m : {2, 5, 6, 7, 13, 48, 49, 100, 301}) {
    auto x = Random(m * k, static_cast<uint32_t>(m));
    const int64_t at = (m * 7919) % m;
    std::memcpy(x.data() + at * k, probe.data(), k * 4);
    for (int threads : {1, 2}) {
      auto out = RunInt8("", threads, w, x, m, k, n);
      EXPECT_EQ(0, std::memcmp(out.data() + at * n, alone.data(), n * 4))
          << "m=" << m << " threads=" << threads;
    }
  }
}

// Zero rows (scale 0) give exactly the bias, not NaN.
TEST(Int8Linear, ZeroRowGivesBias) {
  auto be = MakeCpu();
  const int64_t k = 16, n = 8;
  auto w = Random(n * k, 91), b = Random(n, 92);
  HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
  HostTensor hb{b.data(), DType::kF32, {n}, "b"};
  auto lw = be->PrepareLinear(hw, &hb, DType::kI8);
  ASSERT_TRUE(lw.ok());
  std::vector<float> x(k, 0.f), out(n);
  be->Linear(LinearParams{lw->get(), View(x, 1, k), View(out, 1, n)});
  for (int64_t j = 0; j < n; ++j) EXPECT_EQ(out[j], b[j]);
}

}  // namespace
}  // namespace sluice
