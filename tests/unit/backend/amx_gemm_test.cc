// sluice's AMX GEMM (gemm_x86.h GemmBf16Amx / GemmI8Amx, gemm_amx_inl.h).
//
// AmxEmu*: the very same driver and micro-tile code over AmxEmuOps, a portable emulation
// of the tile instructions (SDM pseudo-code), so the tile indexing, the M/N/K tails, the
// padded last row tile and the epilogue are checked on every machine:
//   bf16: bit for bit against a scalar loop in the pseudo-code's order (k pairs in order,
//         even then odd product, each product and sum rounded to f32), and within the
//         linear_test.cc bf16 bound of a double reference (4e-5 * sqrt(K) + 4e-5 * |ref|);
//   int8: bit for bit against GemmI8 (VNNI or portable: the same integers, same epilogue);
//   a row's bits do not depend on M, its position or the thread count.
// AmxHw*: the real instructions; skipped (GTEST_SKIP) where AMX is not usable (CPU, ISA
// cap, Linux permission). bf16 within the same bound of the double reference and of
// vdpbf16ps (the hardware's internal accumulation order/rounding of a 16-pair step is not
// specified to be the pseudo-code's; the max difference from the emulation is printed);
// int8 bit for bit against GemmI8; row bits independent of M and thread count.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/gemm_amx_inl.h"
#include "backend/cpu/gemm_x86.h"
#include "backend/cpu/reference.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::Random;
namespace x86 = cpu::x86;

enum class Impl { kEmu, kHw, kAvx512 };

// The AMX tile schedule the kEmu and kHw runs use (every schedule gives the same bits),
// and whether int8 activations are in the A-tile layout (QuantizeI8Tiles) rather than rows.
x86::AmxKernel g_kernel = x86::AmxKernel::k1x4;
bool g_tiles = false;

template <class Ops>
void DriveEmu(const x86::AmxPlan& plan) {
  x86::AmxPlan p = plan;
  p.kernel = g_kernel;
  x86::AmxDrive<Ops>(p);
}

struct KernelScope {  // g_kernel (and the library's choice for kHw) for one scope
  explicit KernelScope(x86::AmxKernel k) : saved(g_kernel) {
    g_kernel = k;
    x86::SetAmxKernelForTesting(k);
  }
  ~KernelScope() {
    g_kernel = saved;
    x86::ResetAmxKernelForTesting();
  }
  x86::AmxKernel saved;
};

const x86::AmxKernel kKernels[] = {x86::AmxKernel::k1x4, x86::AmxKernel::k2x2,
                                   x86::AmxKernel::k2x2Prefetch};

struct TilesScope {  // g_tiles for one scope
  explicit TilesScope(bool t) : saved(g_tiles) { g_tiles = t; }
  ~TilesScope() { g_tiles = saved; }
  bool saved;
};

// bf16 operands packed as the kernels read them.
struct Bf16Case {
  int64_t m, k, n;
  std::vector<uint16_t> packed, xb;
  std::vector<float> w, x, bias;
  Bf16Case(int64_t m_, int64_t k_, int64_t n_, uint32_t seed) : m(m_), k(k_), n(n_) {
    w = Random(n * k, seed);
    x = Random(m * k, seed + 1, -2.f, 2.f);
    bias = Random(n, seed + 2);
    packed.resize(x86::PackedBf16Size(n, k));
    x86::PackBf16(w.data(), n, k, packed.data());
    xb.resize(m * 2 * x86::KPairs(k));
    x86::ConvertBf16(x.data(), k, m, k, xb.data());
  }
  void SetRow(int64_t r, const std::vector<float>& row) {
    std::memcpy(x.data() + r * k, row.data(), k * 4);
    x86::ConvertBf16(x.data(), k, m, k, xb.data());
  }
};

// out [m, ldo] (ldo = n + 3); epilogue: bias (opt.), act, sum over the given out contents.
void RunBf16(Impl impl, const Bf16Case& c, const float* bias, Activation act, bool sum,
             std::vector<float>* out) {
  x86::Bf16Args a;
  a.x = c.xb.data();
  a.m = c.m;
  a.k = c.k;
  a.n = c.n;
  a.packed = c.packed.data();
  a.bias = bias;
  a.act = act;
  a.sum = sum;
  a.out = out->data();
  a.ldo = c.n + 3;
  if (impl == Impl::kEmu) {
    DriveEmu<x86::AmxEmuOps<false>>(x86::AmxPlanBf16(a));
  } else if (impl == Impl::kHw) {
    x86::GemmBf16Amx(a);
  } else {
    x86::GemmBf16(a);
  }
}

struct I8Case {
  int64_t m, k, n;
  std::vector<int8_t> packed;
  std::vector<float> w_scale, x_scale, w, x, bias;
  std::vector<int32_t> colsum;
  std::vector<uint8_t> xq, xt;  // rows and tiles (the same bytes, two layouts)
  I8Case(int64_t m_, int64_t k_, int64_t n_, uint32_t seed) : m(m_), k(k_), n(n_) {
    w = Random(n * k, seed);
    x = Random(m * k, seed + 1, -3.f, 3.f);
    bias = Random(n, seed + 2);
    packed.resize(x86::PackedI8Size(n, k));
    w_scale.resize(x86::Blocks(n) * x86::kBlockN);
    colsum.resize(x86::Blocks(n) * x86::kBlockN);
    x86::PackI8(w.data(), n, k, packed.data(), w_scale.data(), colsum.data());
    Quantize();
  }
  void Quantize() {
    xq.resize(m * 4 * x86::KQuads(k));
    x_scale.resize(m);
    x86::QuantizeI8(x.data(), k, m, k, xq.data(), x_scale.data());
    xt.assign(x86::QuantizedTilesSize(m, k), 0);
    std::vector<float> scale_t(m);
    x86::QuantizeI8Tiles(x.data(), k, m, k, xt.data(), scale_t.data());
    EXPECT_EQ(0, std::memcmp(scale_t.data(), x_scale.data(), m * sizeof(float)));
  }
  void SetRow(int64_t r, const std::vector<float>& row) {
    std::memcpy(x.data() + r * k, row.data(), k * 4);
    Quantize();
  }
};

void RunI8(Impl impl, const I8Case& c, Activation act, bool sum, std::vector<float>* out) {
  x86::I8Args a;
  const bool tiles = g_tiles && impl != Impl::kAvx512;
  a.x = tiles ? c.xt.data() : c.xq.data();
  a.x_tiles = tiles;
  a.x_scale = c.x_scale.data();
  a.m = c.m;
  a.k = c.k;
  a.n = c.n;
  a.packed = c.packed.data();
  a.w_scale = c.w_scale.data();
  a.colsum = c.colsum.data();
  a.bias = c.bias.data();
  a.act = act;
  a.sum = sum;
  a.out = out->data();
  a.ldo = c.n + 3;
  if (impl == Impl::kEmu) {
    DriveEmu<x86::AmxEmuOps<true>>(x86::AmxPlanI8(a));
  } else if (impl == Impl::kHw) {
    x86::GemmI8Amx(a);
  } else {
    x86::GemmI8(a);
  }
}

const std::vector<std::array<int64_t, 3>>& Shapes() {  // M, K, N: tails in each
  // (row tiles: 1, 2 (a 2x2 pair), 3 (a pair and a lone tile), 5 (two groups of 4 tiles))
  static const std::vector<std::array<int64_t, 3>> s = {
      {1, 7, 5},    {15, 32, 64},   {16, 33, 65},  {17, 100, 150},
      {33, 64, 63}, {70, 520, 130}, {5, 1024, 64}, {48, 200, 200}};
  return s;
}

// The pseudo-code order in scalar code: k pairs in order, even then odd product, each
// rounded to f32 (DAZ/FTZ as the emulated tiles, amx_emu_inl.h).
float ScalarDot(const uint16_t* xb, const float* wrow, int64_t k) {
  float acc = 0.f;
  for (int64_t kk = 0; kk < 2 * x86::KPairs(k); ++kk) {
    const uint16_t wb = kk < k ? F32ToBF16(wrow[kk]) : 0;
    volatile float prod = cpu::amx::EmuBf16(reinterpret_cast<const uint8_t*>(xb + kk)) *
                          cpu::amx::EmuBf16(reinterpret_cast<const uint8_t*>(&wb));
    acc = cpu::amx::EmuFtz(acc + prod);
  }
  return acc;
}

TEST(AmxGemm, EmuBf16MatchesPseudoCodeOrderBitForBit) {
  for (const auto& [m, k, n] : Shapes()) {
    Bf16Case c(m, k, n, 11);
    std::vector<float> out(m * (n + 3), -7.f);
    RunBf16(Impl::kEmu, c, nullptr, Activation::kNone, false, &out);
    const int64_t ldb = 2 * x86::KPairs(k);
    int64_t bad = 0;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        const float want = ScalarDot(c.xb.data() + r * ldb, c.w.data() + j * k, k);
        const float got = out[r * (n + 3) + j];
        if (std::memcmp(&want, &got, 4) != 0 && bad++ < 5) {
          ADD_FAILURE() << "m=" << m << " k=" << k << " n=" << n << " at " << r << "," << j << ": "
                        << got << " vs " << want;
        }
      }
      for (int64_t j = n; j < n + 3; ++j) EXPECT_EQ(out[r * (n + 3) + j], -7.f);  // untouched
    }
    EXPECT_EQ(bad, 0) << "m=" << m << " k=" << k << " n=" << n;
  }
}

// bf16 with the full epilogue against the double reference on bf16-rounded operands.
void CheckBf16VsReference(Impl impl) {
  for (const auto& [m, k, n] : Shapes()) {
    for (bool bias_sum : {false, true}) {
      Bf16Case c(m, k, n, 21);
      const Activation act = bias_sum ? Activation::kGeluErf : Activation::kNone;
      auto res = Random(m * (n + 3), 23);
      std::vector<float> out = res;
      RunBf16(impl, c, bias_sum ? c.bias.data() : nullptr, act, bias_sum, &out);
      std::vector<float> xr(m * k), wr(n * k), rr(m * n), ref(m * n), got(m * n);
      for (size_t i = 0; i < xr.size(); ++i) xr[i] = BF16ToF32(F32ToBF16(c.x[i]));
      for (size_t i = 0; i < wr.size(); ++i) wr[i] = BF16ToF32(F32ToBF16(c.w[i]));
      for (int64_t r = 0; r < m; ++r) {
        std::memcpy(rr.data() + r * n, res.data() + r * (n + 3), n * 4);
        std::memcpy(got.data() + r * n, out.data() + r * (n + 3), n * 4);
      }
      cpu::ref::Linear(xr.data(), m, k, wr.data(), bias_sum ? c.bias.data() : nullptr, n, act,
                       bias_sum ? rr.data() : nullptr, ref.data());
      EXPECT_CLOSE(got.data(), ref.data(), got.size(), 4e-5 * std::sqrt(double(k)), 4e-5)
          << "m=" << m << " k=" << k << " n=" << n << " epilogue=" << bias_sum;
    }
  }
}

TEST(AmxGemm, EmuBf16WithinBoundOfReference) { CheckBf16VsReference(Impl::kEmu); }

// int8: bit for bit the VNNI (or portable) kernel's outputs, with the full epilogue.
void CheckI8VsGemmI8(Impl impl) {
  for (const auto& [m, k, n] : Shapes()) {
    for (bool sum : {false, true}) {
      I8Case c(m, k, n, 31);
      auto res = Random(m * (n + 3), 33);
      std::vector<float> want = res, got = res;
      RunI8(Impl::kAvx512, c, Activation::kGeluTanh, sum, &want);
      RunI8(impl, c, Activation::kGeluTanh, sum, &got);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4))
          << "m=" << m << " k=" << k << " n=" << n << " sum=" << sum << " vs "
          << x86::I8KernelName();
    }
  }
}

TEST(AmxGemm, EmuI8MatchesGemmI8BitForBit) {
  for (bool tiles : {false, true}) {
    TilesScope ts(tiles);
    for (auto k : kKernels) {
      KernelScope scope(k);
      CheckI8VsGemmI8(Impl::kEmu);
    }
  }
}

// QuantizeI8Tiles: QuantizeI8's bytes and scales, rearranged into 1 KB A tiles (row tile t,
// k step s at (t * steps + s) * 1024, row i at + 64 i), the rows past m up to a multiple of
// 16 all 128; from f32 and from bf16 rows with a row stride.
TEST(AmxGemm, QuantizeTilesIsQuantizeRearranged) {
  for (auto [m, k] : {std::array<int64_t, 2>{1, 7}, {16, 64}, {17, 100}, {40, 1100}}) {
    const int64_t ld = 4 * x86::KQuads(k), steps = x86::KQuads(k) / 16, ldx = k + 5;
    auto x = Random(m * ldx, static_cast<uint32_t>(m + k), -3.f, 3.f);
    std::vector<uint16_t> x16(x.size());
    for (size_t i = 0; i < x.size(); ++i) x16[i] = F32ToBF16(x[i]);
    for (bool bf16 : {false, true}) {
      std::vector<uint8_t> rows(m * ld), tiles(x86::QuantizedTilesSize(m, k), 7);
      std::vector<float> sr(m), st(m);
      if (bf16) {
        x86::QuantizeI8(x16.data(), ldx, m, k, rows.data(), sr.data());
        x86::QuantizeI8Tiles(x16.data(), ldx, m, k, tiles.data(), st.data());
      } else {
        x86::QuantizeI8(x.data(), ldx, m, k, rows.data(), sr.data());
        x86::QuantizeI8Tiles(x.data(), ldx, m, k, tiles.data(), st.data());
      }
      EXPECT_EQ(0, std::memcmp(sr.data(), st.data(), m * sizeof(float)));
      ASSERT_EQ(static_cast<int64_t>(tiles.size()), (m + 15) / 16 * 16 * ld);
      int64_t bad = 0;
      for (int64_t r = 0; r < (m + 15) / 16 * 16; ++r) {
        for (int64_t c = 0; c < ld; ++c) {
          const uint8_t want = r < m ? rows[r * ld + c] : 128;
          bad += tiles[((r / 16) * steps + c / 64) * 1024 + (r % 16) * 64 + c % 64] != want;
        }
      }
      EXPECT_EQ(0, bad) << "m=" << m << " k=" << k << " bf16=" << bf16;
    }
  }
}

// Every tile schedule and blocking gives the default 1x4 schedule's bits (bf16 and int8,
// with the epilogue), over M with pairs of row tiles, lone last tiles and padded tails, and
// K over several of 1x4's chunks.
void CheckKernelsAgree(Impl impl) {
  std::vector<std::array<int64_t, 3>> shapes = Shapes();
  for (std::array<int64_t, 3> s :
       {std::array<int64_t, 3>{64, 1100, 130}, {100, 300, 64}, {129, 2100, 70}, {32, 4096, 20}}) {
    shapes.push_back(s);
  }
  for (const auto& [m, k, n] : shapes) {
    Bf16Case bc(m, k, n, 71);
    I8Case ic(m, k, n, 73);
    auto res = Random(m * (n + 3), 75);
    std::vector<float> want_b = res, want_i = res;
    {
      KernelScope scope(x86::AmxKernel::k1x4);
      RunBf16(impl, bc, bc.bias.data(), Activation::kGeluErf, true, &want_b);
      RunI8(impl, ic, Activation::kGeluErf, true, &want_i);
    }
    // The other schedules, and every schedule under other blockings (AmxTuning: K chunks of
    // one tile row or of more than K, 1 to 8 row tiles per tile, weight tiles of 1 block).
    const char* tunings[] = {"128:4:1024", "16:1:16", "48:8:64", "512:3:4096", "32:2:1"};
    for (auto kernel : kKernels) {
      for (const char* tune : tunings) {
        x86::AmxTuning t;
        ASSERT_TRUE(x86::ParseAmxTuning(tune, &t)) << tune;
        if (kernel == x86::AmxKernel::k1x4 && tune == tunings[0]) continue;  // the reference
        KernelScope scope(kernel);
        x86::SetAmxTuningForTesting(t);
        std::vector<float> got_b = res, got_i = res, got_t = res;
        RunBf16(impl, bc, bc.bias.data(), Activation::kGeluErf, true, &got_b);
        RunI8(impl, ic, Activation::kGeluErf, true, &got_i);
        {
          TilesScope ts(true);
          RunI8(impl, ic, Activation::kGeluErf, true, &got_t);
        }
        x86::ResetAmxTuningForTesting();
        EXPECT_EQ(0, std::memcmp(want_i.data(), got_t.data(), want_i.size() * 4))
            << "int8 tiles m=" << m << " k=" << k << " n=" << n << " " << x86::AmxKernelName(kernel)
            << " " << tune;
        EXPECT_EQ(0, std::memcmp(want_b.data(), got_b.data(), want_b.size() * 4))
            << "bf16 m=" << m << " k=" << k << " n=" << n << " " << x86::AmxKernelName(kernel)
            << " " << tune;
        EXPECT_EQ(0, std::memcmp(want_i.data(), got_i.data(), want_i.size() * 4))
            << "int8 m=" << m << " k=" << k << " n=" << n << " " << x86::AmxKernelName(kernel)
            << " " << tune;
      }
    }
  }
}

TEST(AmxGemm, EmuKernelsGiveTheSameBits) { CheckKernelsAgree(Impl::kEmu); }

TEST(AmxGemm, TuningParsesAndRefuses) {
  x86::AmxTuning t;
  ASSERT_TRUE(x86::ParseAmxTuning("64:8:512:noepi", &t));
  EXPECT_EQ(64, t.chunk);
  EXPECT_EQ(8, t.tile_group);
  EXPECT_EQ(512 << 10, t.l2_bytes);
  EXPECT_FALSE(t.epilogue);
  ASSERT_TRUE(x86::ParseAmxTuning("128:4:1024", &t));
  EXPECT_TRUE(t.epilogue);
  for (const char* bad : {"", "128", "128:4", "8:4:1024", "100:4:1024", "128:0:1024", "128:9:1024",
                          "128:4:0", "128:4:1024:x", "a:4:1024", "128:4:1024:",
                          "128:4:1024:noepi:noepi", "128:4:1024:t1", "128:4:1024:ovl"}) {
    EXPECT_FALSE(x86::ParseAmxTuning(bad, &t)) << bad;
  }
  const x86::AmxTuning d = x86::CurrentAmxTuning();  // the defaults
  EXPECT_EQ(128, d.chunk);
  EXPECT_EQ(4, d.tile_group);
  EXPECT_EQ(1 << 20, d.l2_bytes);
  EXPECT_TRUE(d.epilogue);
  // The schedules and the int8 activation layout by default (measured, gemm_amx.cc).
  EXPECT_FALSE(x86::AmxKernelOverridden());
  EXPECT_EQ(x86::AmxKernel::k2x2, x86::CurrentAmxKernel(true));
  EXPECT_EQ(x86::AmxKernel::k1x4, x86::CurrentAmxKernel(false));
  EXPECT_TRUE(x86::AmxI8TiledA());
  x86::SetAmxKernelForTesting(x86::AmxKernel::k2x2Prefetch);
  EXPECT_TRUE(x86::AmxKernelOverridden());
  EXPECT_EQ(x86::AmxKernel::k2x2Prefetch, x86::CurrentAmxKernel(true));
  EXPECT_EQ(x86::AmxKernel::k2x2Prefetch, x86::CurrentAmxKernel(false));
  x86::ResetAmxKernelForTesting();
}

// A probe row's output bits vs alone (M = 1): at positions in batches of many M, with 1
// and 2 threads.
void CheckRowInvariance(Impl impl, bool int8, int64_t k, const std::vector<int64_t>& ms) {
  const int64_t n = 150;
  auto probe = Random(k, 44, -2.f, 2.f);
  auto run = [&](int64_t m, int64_t at, uint32_t seed) {
    std::vector<float> out(m * (n + 3), 0.f);
    if (int8) {
      I8Case c(m, k, n, seed);
      c.w = Random(n * k, 41);  // the same weights and bias for every M
      c.bias = Random(n, 42);
      x86::PackI8(c.w.data(), n, k, c.packed.data(), c.w_scale.data(), c.colsum.data());
      c.SetRow(at, probe);
      RunI8(impl, c, Activation::kGeluErf, false, &out);
    } else {
      Bf16Case c(m, k, n, seed);
      c.w = Random(n * k, 41);
      c.bias = Random(n, 42);
      x86::PackBf16(c.w.data(), n, k, c.packed.data());
      c.SetRow(at, probe);
      RunBf16(impl, c, c.bias.data(), Activation::kGeluErf, false, &out);
    }
    return std::vector<float>(out.begin() + at * (n + 3), out.begin() + at * (n + 3) + n);
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto alone = run(1, 0, 45);
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (int64_t m : ms) {
      const int64_t at = (m * 7919) % m;
      const auto got = run(m, at, static_cast<uint32_t>(100 + m));
      EXPECT_EQ(0, std::memcmp(got.data(), alone.data(), n * 4))
          << (int8 ? "int8" : "bf16") << " k=" << k << " m=" << m << " at=" << at
          << " threads=" << threads;
    }
  }
  omp_set_num_threads(saved);
}

const std::vector<int64_t> kInvarianceMs = {2, 7, 15, 16, 17, 31, 32, 33, 64, 65, 100, 131};

TEST(AmxGemm, EmuRowIndependentOfMPositionAndThreads) {
  for (auto kernel : kKernels) {
    KernelScope scope(kernel);
    for (int64_t k : {200, 1100}) {  // 1100: several K chunks (AmxTuning::chunk) for bf16 and int8
      CheckRowInvariance(Impl::kEmu, false, k, kInvarianceMs);
      CheckRowInvariance(Impl::kEmu, true, k, kInvarianceMs);
      TilesScope ts(true);
      CheckRowInvariance(Impl::kEmu, true, k, kInvarianceMs);
    }
  }
}

// ---- the real AMX instructions (skipped without AMX) ----

#define SKIP_WITHOUT_AMX(usable, what)                                                 \
  if (!(usable)) {                                                                     \
    GTEST_SKIP() << "AMX-" what " not usable here (" << cpu::FeatureSummary()          \
                 << "): run on an AMX machine (Sapphire Rapids or later, no ISA cap)"; \
  }

TEST(AmxGemm, HwBf16WithinBoundOfReference) {
  SKIP_WITHOUT_AMX(x86::AmxBf16Usable(), "BF16");
  CheckBf16VsReference(Impl::kHw);
}

// vs the emulation and vdpbf16ps: the same exact products, f32 accumulation in possibly
// different orders/roundings. Bound per element: 2 * K * 2^-24 * sum_k |x_k w_k| (twice
// the worst-case error bound of a K-term f32 sum), printed with the observed maximum.
TEST(AmxGemm, HwBf16NearEmulationAndVdpbf16) {
  SKIP_WITHOUT_AMX(x86::AmxBf16Usable(), "BF16");
  for (const auto& [m, k, n] : Shapes()) {
    Bf16Case c(m, k, n, 51);
    std::vector<float> hw(m * (n + 3)), emu = hw, dp = hw;
    RunBf16(Impl::kHw, c, nullptr, Activation::kNone, false, &hw);
    RunBf16(Impl::kEmu, c, nullptr, Activation::kNone, false, &emu);
    const bool have_dp = cpu::Features().avx512_bf16;
    if (have_dp) RunBf16(Impl::kAvx512, c, nullptr, Activation::kNone, false, &dp);
    double worst_emu = 0, worst_dp = 0;
    int64_t exact = 0;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < n; ++j) {
        double abs_sum = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          abs_sum += std::fabs(double(BF16ToF32(F32ToBF16(c.x[r * k + kk]))) *
                               BF16ToF32(F32ToBF16(c.w[j * k + kk])));
        }
        const double bound = 2.0 * k * std::ldexp(1.0, -24) * abs_sum + 1e-30;
        const int64_t i = r * (n + 3) + j;
        const double de = std::fabs(double(hw[i]) - emu[i]);
        exact += hw[i] == emu[i];
        EXPECT_LE(de, bound) << "vs emulation m=" << m << " k=" << k << " n=" << n;
        worst_emu = std::max(worst_emu, de / bound);
        if (have_dp) {
          const double dd = std::fabs(double(hw[i]) - dp[i]);
          EXPECT_LE(dd, bound) << "vs vdpbf16ps m=" << m << " k=" << k << " n=" << n;
          worst_dp = std::max(worst_dp, dd / bound);
        }
      }
    }
    std::printf(
        "amx bf16 m=%ld k=%ld n=%ld: %ld/%ld equal to the emulation; max diff / bound: "
        "emulation %.3g, vdpbf16ps %.3g\n",
        static_cast<long>(m), static_cast<long>(k), static_cast<long>(n), static_cast<long>(exact),
        static_cast<long>(m * n), worst_emu, worst_dp);
  }
}

TEST(AmxGemm, HwI8MatchesGemmI8BitForBit) {
  SKIP_WITHOUT_AMX(x86::AmxI8Usable(), "INT8");
  CheckI8VsGemmI8(Impl::kHw);
  {
    TilesScope ts(true);
    for (auto k : kKernels) {
      KernelScope scope(k);
      CheckI8VsGemmI8(Impl::kHw);
    }
  }
  I8Case c(40, 300, 70, 61);  // and the emulation: the same integers
  std::vector<float> hw(40 * 73), emu(40 * 73);
  RunI8(Impl::kHw, c, Activation::kNone, false, &hw);
  RunI8(Impl::kEmu, c, Activation::kNone, false, &emu);
  EXPECT_EQ(0, std::memcmp(hw.data(), emu.data(), hw.size() * 4));
}

TEST(AmxGemm, HwRowIndependentOfMPositionAndThreads) {
  SKIP_WITHOUT_AMX(x86::AmxBf16Usable() && x86::AmxI8Usable(), "BF16/INT8");
  std::vector<int64_t> ms = kInvarianceMs;
  for (int64_t m : {300, 1000, 2049}) ms.push_back(m);
  for (auto kernel : kKernels) {
    KernelScope scope(kernel);
    for (int64_t k : {200, 1100, 3072}) {
      CheckRowInvariance(Impl::kHw, false, k, ms);
      CheckRowInvariance(Impl::kHw, true, k, ms);
      TilesScope ts(true);
      CheckRowInvariance(Impl::kHw, true, k, ms);
    }
  }
}

TEST(AmxGemm, HwKernelsGiveTheSameBits) {
  SKIP_WITHOUT_AMX(x86::AmxBf16Usable() && x86::AmxI8Usable(), "BF16/INT8");
  CheckKernelsAgree(Impl::kHw);
}

// The path's name and its refusal without AMX (SLUICE_CPU_LINEAR=amx never silently
// falls back for bf16/int8; f32 has no AMX path and keeps its own).
TEST(AmxGemm, LinearPathChoiceAndRefusal) {
  const std::string desc = cpu::LinearRunner::Describe();
  // bf16's default stays oneDNN's AMX kernel where AMX is usable (measured: even overall,
  // behind at M = 16); sluice's AMX bf16 GEMM only when asked for.
  EXPECT_EQ(desc.find("sluice-amx"), std::string::npos) << desc;
  if (x86::AmxI8Usable()) {
    EXPECT_NE(desc.find("int8 sluice-int8(amx)"), std::string::npos) << desc;
  } else {
    EXPECT_EQ(desc.find("(amx)"), std::string::npos) << desc;
  }
  cpu::SetMaxIsaForTesting("avx512_bf16");  // below AMX: never usable
  EXPECT_FALSE(x86::AmxBf16Usable());
  EXPECT_FALSE(x86::AmxI8Usable());
  cpu::LinearRunner::SetPathForTesting("amx");
  auto be = testing::MakeCpu();
  auto w = Random(32 * 16, 1);
  HostTensor hw{w.data(), DType::kF32, {32, 16}, "w"};
  for (auto [dtype, what] :
       {std::pair{DType::kBF16, "AMX-BF16"}, std::pair{DType::kI8, "AMX-INT8"}}) {
    auto lw = be->PrepareLinear(hw, nullptr, dtype);
    ASSERT_FALSE(lw.ok());
    EXPECT_NE(lw.status().message().find(what), std::string::npos) << lw.status().ToString();
  }
  EXPECT_TRUE(be->PrepareLinear(hw, nullptr, DType::kF32).ok());
  cpu::LinearRunner::SetPathForTesting("");
  cpu::SetMaxIsaForTesting("");
}

}  // namespace
}  // namespace sluice
