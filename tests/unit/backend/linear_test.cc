// Linear (oneDNN matmul and sluice's own GEMM) vs the double-precision reference, and
// batch invariance; every test runs on both paths, and sluice's GEMM on every SIMD target.
// Tolerances: f32 atol 1e-5 * sqrt(K) + rtol 1e-5; bf16 is checked against the reference
// run on bf16-rounded x and W (products are exact in f32, accumulation f32), same bound x4.
#include <hwy/targets.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/cpu_linear.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_x86.h"
#include "backend/cpu/reference.h"
#include "test_util.h"

namespace sluice {
namespace {

using testing::MakeCpu;
using testing::Random;
using testing::View;

std::vector<float> RoundBf16(std::vector<float> v) {
  for (auto& x : v) x = BF16ToF32(F32ToBF16(x));
  return v;
}

struct LinearCase {
  int64_t m, k, n;
  bool bias;
  Activation act;
  bool residual;
};

void CheckLinear(Backend& be, DType dtype, const LinearCase& c, bool strided) {
  auto w = Random(c.n * c.k, 21), b = Random(c.n, 22);
  HostTensor hw{w.data(), DType::kF32, {c.n, c.k}, "w"};
  HostTensor hb{b.data(), DType::kF32, {c.n}, "b"};
  auto lw = be.PrepareLinear(hw, c.bias ? &hb : nullptr, dtype);
  ASSERT_TRUE(lw.ok()) << lw.status().ToString();
  const int64_t ldx = strided ? c.k + 5 : c.k, ldo = strided ? c.n + 3 : c.n;
  auto x = Random(c.m * ldx, 23), res = Random(c.m * c.n, 24);
  std::vector<float> out(c.m * ldo, 0.f);
  Tensor rt = View(res, c.m, c.n);
  be.Linear(LinearParams{lw->get(), View(x, c.m, c.k, ldx), View(out, c.m, c.n, ldo), c.act,
                         c.residual ? &rt : nullptr});

  std::vector<float> xd(c.m * c.k), ref(c.m * c.n), got(c.m * c.n);
  for (int64_t r = 0; r < c.m; ++r) {
    std::memcpy(xd.data() + r * c.k, x.data() + r * ldx, c.k * 4);
    std::memcpy(got.data() + r * c.n, out.data() + r * ldo, c.n * 4);
  }
  std::vector<float> wr = w;
  if (dtype == DType::kBF16) {
    xd = RoundBf16(xd);
    wr = RoundBf16(w);
  }
  cpu::ref::Linear(xd.data(), c.m, c.k, wr.data(), c.bias ? b.data() : nullptr, c.n, c.act,
                   c.residual ? res.data() : nullptr, ref.data());
  const double scale = dtype == DType::kBF16 ? 4.0 : 1.0;
  EXPECT_CLOSE(got.data(), ref.data(), got.size(), scale * 1e-5 * std::sqrt(double(c.k)),
               scale * 1e-5)
      << DTypeName(dtype) << " m=" << c.m << " k=" << c.k << " n=" << c.n
      << " act=" << static_cast<int>(c.act) << " strided=" << strided;
}

// Runs each test with the linear path named by the parameter ("auto": what the machine
// picks, "sluice": sluice's Highway GEMM forced, "avx512bf16": sluice's vdpbf16ps kernel
// for bf16 (skipped without AVX512-BF16), "avx512fma": sluice's bf16-weight f32-FMA
// AVX-512 kernel (skipped without AVX-512), "onednn": oneDNN forced (skipped where oneDNN
// 2.6 has no batch-invariant brgemm kernel, i.e. below AVX-512), "amx": sluice's AMX GEMM
// for bf16 (skipped where AMX-BF16 is not usable: CPU, ISA cap or OS permission).
class CpuLinear : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "avx512bf16" && !cpu::Features().avx512_bf16) {
      GTEST_SKIP() << "no AVX512-BF16 on this CPU";
    }
    if (GetParam() == "avx512fma" && !cpu::Features().avx512) {
      GTEST_SKIP() << "no AVX-512 on this CPU";
    }
    if (GetParam() == "amx" && !cpu::x86::AmxBf16Usable()) {
      GTEST_SKIP() << "AMX-BF16 not usable here (" << cpu::FeatureSummary()
                   << "): run on an AMX machine";
    }
    const std::string isa = cpu::LinearRunner::IsaName();
    if (GetParam() == "onednn" && isa.rfind("avx512", 0) != 0 && isa != "amx") {
      GTEST_SKIP() << "oneDNN has no brgemm kernel at ISA " << isa;
    }
    cpu::LinearRunner::SetPathForTesting(GetParam());
  }
  void TearDown() override { cpu::LinearRunner::SetPathForTesting(""); }
};

TEST_P(CpuLinear, MatchesReference) {
  auto be = MakeCpu();
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t m : {1, 3, 17, 129, 300}) {
      for (int64_t k : {7, 64, 100, 384}) {
        for (int64_t n : {5, 64, 100}) {
          CheckLinear(*be, dtype, {m, k, n, true, Activation::kNone, false}, false);
        }
      }
    }
    for (auto act : {Activation::kGeluErf, Activation::kGeluTanh, Activation::kSilu,
                     Activation::kRelu, Activation::kQuickGelu}) {
      CheckLinear(*be, dtype, {33, 96, 70, true, act, false}, false);
      CheckLinear(*be, dtype, {33, 96, 70, false, act, true}, true);
    }
    CheckLinear(*be, dtype, {130, 64, 48, true, Activation::kNone, true}, true);
    CheckLinear(*be, dtype, {9000, 32, 24, true, Activation::kGeluErf, true}, false);
  }
}

TEST_P(CpuLinear, WeightDtypesAndResidualAlias) {
  auto be = MakeCpu();
  const int64_t m = 19, k = 40, n = 30;
  auto w = Random(n * k, 31);
  std::vector<uint16_t> wb(w.size()), wh(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    wb[i] = F32ToBF16(w[i]);
    wh[i] = F32ToF16(w[i]);
  }
  auto x = Random(m * k, 32);
  std::vector<float> wf_b(w.size()), wf_h(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    wf_b[i] = BF16ToF32(wb[i]);
    wf_h[i] = F16ToF32(wh[i]);
  }
  for (auto [data, dt, wref] : {std::tuple{(void*)wb.data(), DType::kBF16, &wf_b},
                                std::tuple{(void*)wh.data(), DType::kF16, &wf_h}}) {
    HostTensor hw{data, dt, {n, k}, "w"};
    auto lw = be->PrepareLinear(hw, nullptr, DType::kF32);
    ASSERT_TRUE(lw.ok());
    auto out = Random(m * n, 33), ref = out;  // out holds the residual (alias)
    Tensor ot = View(out, m, n);
    be->Linear(LinearParams{lw->get(), View(x, m, k), ot, Activation::kNone, &ot});
    cpu::ref::Linear(x.data(), m, k, wref->data(), nullptr, n, Activation::kNone, ref.data(),
                     ref.data());
    EXPECT_CLOSE(out.data(), ref.data(), out.size(), 1e-5 * std::sqrt(double(k)), 1e-5);
  }
  HostTensor bad{w.data(), DType::kF32, {n * k}, "w1d"};
  EXPECT_FALSE(be->PrepareLinear(bad, nullptr, DType::kF32).ok());
  HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
  EXPECT_FALSE(be->PrepareLinear(hw, nullptr, DType::kF16).ok());
}

// The drivers' weight blocks per scheduling tile: within the cap, as many tiles as the cap
// (and the 4-tiles-per-thread rule) ask for, and no short remainder tile: the last tile is
// at most tiles_n - 1 blocks smaller than the others (24 blocks under a cap of 21 are two
// tiles of 12, not 21 + 3, which gave one of 2 threads 7x the other's blocks).
TEST(CpuLinearPlan, WeightBlocksSpreadEvenlyOverTiles) {
  EXPECT_EQ(cpu::gemm::BlocksPerTile(24, 21, 21, 2), 12);
  for (int64_t blocks = 1; blocks <= 80; ++blocks) {
    for (int64_t cap : {1, 2, 5, 7, 21, 42, 100}) {
      for (int64_t tiles_m : {1, 3, 21}) {
        for (int64_t threads : {1, 2, 16}) {
          const int64_t pb = cpu::gemm::BlocksPerTile(blocks, cap, tiles_m, threads);
          ASSERT_GE(pb, 1);
          EXPECT_LE(pb, std::min(cap, blocks));
          const int64_t tiles_n = (blocks + pb - 1) / pb;
          const int64_t last = blocks - (tiles_n - 1) * pb;
          EXPECT_GE(last, pb - (tiles_n - 1))
              << "blocks " << blocks << " cap " << cap << " tiles_m " << tiles_m;
        }
      }
    }
  }
}

TEST(CpuLinearPlan, BucketsCoverEveryM) {
  for (int64_t m = 1; m <= 20000; ++m) {
    const int64_t b = cpu::LinearRunner::BucketFor(m);
    ASSERT_GE(b, m);
    ASSERT_LE(b, std::max<int64_t>(16, m + m / 8 + 16));
  }
}

// A row's output must not depend on the other rows in the batch (DESIGN.md principle 3):
// the probe row alone vs at varying positions in batches of M = 1..600 mixed rows.
void CheckBatchInvariance(DType dtype, int64_t k, int64_t n, const std::vector<int64_t>& ms) {
  auto be = MakeCpu();
  auto w = Random(n * k, 41), b = Random(n, 42);
  HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
  HostTensor hb{b.data(), DType::kF32, {n}, "b"};
  auto lw = be->PrepareLinear(hw, &hb, dtype);
  ASSERT_TRUE(lw.ok());
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  auto x = Random(max_m * k, 43);
  auto probe = Random(k, 44);
  std::vector<float> alone(n), out(max_m * n);
  be->Linear(LinearParams{lw->get(), View(probe, 1, k), View(alone, 1, n), Activation::kGeluErf});
  double worst = 0;
  int64_t worst_m = 0;
  for (int64_t m : ms) {
    const int64_t at = (m * 7919) % m;  // probe position varies with m
    std::memcpy(x.data() + at * k, probe.data(), k * 4);
    be->Linear(LinearParams{lw->get(), View(x, m, k), View(out, m, n), Activation::kGeluErf});
    const double d = testing::MaxAbsDiff(out.data() + at * n, alone.data(), n);
    if (d > worst) {
      worst = d;
      worst_m = m;
    }
    // Restore random content so that the batch stays mixed.
    auto fill = Random(k, static_cast<uint32_t>(m));
    std::memcpy(x.data() + at * k, fill.data(), k * 4);
  }
  EXPECT_LE(worst, 1e-5) << DTypeName(dtype) << " worst M=" << worst_m;
  ::testing::Test::RecordProperty(std::string("max_abs_diff_") + DTypeName(dtype),
                                  std::to_string(worst));
  std::printf("batch invariance %s K=%ld N=%ld: max |alone - batched| = %g\n", DTypeName(dtype),
              static_cast<long>(k), static_cast<long>(n), worst);
}

std::vector<int64_t> AllM(int64_t hi) {
  std::vector<int64_t> v;
  for (int64_t m = 1; m <= hi; ++m) v.push_back(m);
  return v;
}

TEST_P(CpuLinear, BatchInvarianceF32) { CheckBatchInvariance(DType::kF32, 128, 96, AllM(600)); }
TEST_P(CpuLinear, BatchInvarianceBF16) { CheckBatchInvariance(DType::kBF16, 128, 96, AllM(600)); }
TEST_P(CpuLinear, BatchInvarianceLargeShapes) {
  const std::vector<int64_t> ms = {1, 2, 5, 16, 33, 100, 257, 600, 1000, 2049, 8192, 9001};
  CheckBatchInvariance(DType::kF32, 768, 768, ms);
  CheckBatchInvariance(DType::kBF16, 1024, 3072, {1, 7, 100, 600, 2500});
}

// Same result with 1 and 2 threads (bit-identical), for small and large M.
TEST_P(CpuLinear, ThreadCountInvariance) {
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    for (int64_t m : {1, 5, 300, 2000}) {
      const int64_t k = 3072, n = 768;
      auto w = Random(n * k, 51), x = Random(m * k, 52);
      HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
      std::vector<float> out[2];
      for (int t = 0; t < 2; ++t) {
        auto be = MakeCpu(t + 1);
        auto lw = be->PrepareLinear(hw, nullptr, dtype);
        ASSERT_TRUE(lw.ok());
        out[t].resize(m * n);
        be->Linear(LinearParams{lw->get(), View(x, m, k), View(out[t], m, n)});
      }
      // oneDNN's AMX bf16 kernels block the K reduction by thread count: there the rows
      // agree within f32 rounding (the batch-invariance tolerance), elsewhere (sluice's
      // kernels, AMX included) bit for bit. "auto" runs oneDNN's AMX kernel for bf16 where
      // AMX is usable (cpu_linear.cc ChoosePath), so the path it took is read back.
      const bool onednn_bf16 = GetParam() == "onednn" ||
                               (GetParam() == "auto" && cpu::LinearRunner::Describe().find(
                                                            "bf16 oneDNN") != std::string::npos);
      if (dtype == DType::kBF16 && onednn_bf16 && cpu::LinearRunner::IsaName() == "amx") {
        double worst = 0, scale = 0;
        for (int64_t i = 0; i < m * n; ++i) {
          worst = std::max(worst, static_cast<double>(std::fabs(out[0][i] - out[1][i])));
          scale = std::max(scale, static_cast<double>(std::fabs(out[0][i])));
        }
        EXPECT_LE(worst, 1e-5 * scale) << "bf16 (amx) m=" << m;
        continue;
      }
      EXPECT_EQ(0, std::memcmp(out[0].data(), out[1].data(), m * n * 4))
          << DTypeName(dtype) << " m=" << m;
    }
  }
}

// bf16 activations (Backend::InnerActivationDType): x, out and the residual in bf16 give,
// bit for bit, the f32 path's result on the widened values, rounded once to bf16 (every
// kernel computes the f32 result first, and a bf16-weight kernel rounds x to bf16 anyway).
// For f32, bf16 and int8 weights; x in place (k a multiple of 32), padded (k = 100) and
// strided (a column view); out and residual separate and aliased.
TEST_P(CpuLinear, Bf16ActivationsAreTheF32PathRounded) {
  auto be = MakeCpu();
  for (DType dtype : {DType::kBF16, DType::kF32, DType::kI8}) {
    for (int64_t k : {64, 100, 384}) {
      const int64_t n = 96;
      auto w = Random(n * k, 41), b = Random(n, 42);
      HostTensor hw{w.data(), DType::kF32, {n, k}, "w"};
      HostTensor hb{b.data(), DType::kF32, {n}, "b"};
      auto lw = be->PrepareLinear(hw, &hb, dtype);
      ASSERT_TRUE(lw.ok()) << lw.status().ToString();
      for (int64_t m : {1, 17, 300}) {
        for (bool strided : {false, true}) {
          for (int mode = 0; mode < 3; ++mode) {  // no residual, residual, residual aliased
            const int64_t ldx = strided ? k + 32 : k;
            const auto x16 = testing::ToBf16(Random(m * ldx, 43));
            auto xf = testing::FromBf16(x16);
            const auto res16 = testing::ToBf16(Random(m * n, 44));
            auto resf = testing::FromBf16(res16);
            const Activation act = mode == 0 ? Activation::kGeluErf : Activation::kNone;
            std::vector<float> of = mode == 2 ? resf : std::vector<float>(m * n, 0.f);
            Tensor rf = View(resf, m, n), oft = View(of, m, n);
            be->Linear(LinearParams{lw->get(), View(xf, m, k, ldx), oft, act,
                                    mode == 0   ? nullptr
                                    : mode == 1 ? &rf
                                                : &oft});
            auto x16m = x16, r16m = res16;
            std::vector<uint16_t> o16 = mode == 2 ? res16 : std::vector<uint16_t>(m * n, 0);
            Tensor xt{x16m.data(), DType::kBF16, m, k, ldx};
            Tensor rt{r16m.data(), DType::kBF16, m, n, 0};
            Tensor ot{o16.data(), DType::kBF16, m, n, 0};
            be->Linear(LinearParams{lw->get(), xt, ot, act,
                                    mode == 0   ? nullptr
                                    : mode == 1 ? &rt
                                                : &ot});
            const std::string what = std::string(DTypeName(dtype)) + " m=" + std::to_string(m) +
                                     " k=" + std::to_string(k) +
                                     " strided=" + std::to_string(strided) +
                                     " mode=" + std::to_string(mode);
            EXPECT_EQ(testing::ToBf16(of), o16) << what << ": bf16 in and out";
            if (mode != 0) continue;
            std::vector<float> o32(m * n, 0.f);  // bf16 in, f32 out: the same f32 bits
            be->Linear(LinearParams{lw->get(), xt, View(o32, m, n), act, nullptr});
            EXPECT_EQ(0, std::memcmp(o32.data(), of.data(), o32.size() * 4)) << what;
            std::vector<uint16_t> o16b(m * n, 0);  // f32 in, bf16 out
            be->Linear(LinearParams{lw->get(), View(xf, m, k, ldx),
                                    Tensor{o16b.data(), DType::kBF16, m, n, 0}, act, nullptr});
            EXPECT_EQ(testing::ToBf16(of), o16b) << what << ": f32 in, bf16 out";
          }
        }
      }
    }
  }
}

// The CPU backend keeps bf16 inner activations next to bf16 and int8 weights (f32 models keep
// f32), SLUICE_CPU_ACTIVATIONS=f32 turns them off, and any other value is refused when the
// backend is created, naming it.
TEST(CpuBackend, InnerActivationDTypeFollowsWeightsAndEnvironment) {
  auto be = CreateBackend(BackendOptions{});
  ASSERT_TRUE(be.ok());
  EXPECT_EQ((*be)->InnerActivationDType(DType::kBF16), DType::kBF16);
  EXPECT_EQ((*be)->InnerActivationDType(DType::kF32), DType::kF32);
  EXPECT_EQ((*be)->InnerActivationDType(DType::kI8), DType::kBF16);
  EXPECT_EQ((*be)->ActivationDType(DType::kBF16), DType::kF32);  // the residual stream
  EXPECT_NE((*be)->Describe().find("inner activations bf16"), std::string::npos);
  setenv("SLUICE_CPU_ACTIVATIONS", "f32", 1);
  auto f32 = CreateBackend(BackendOptions{});
  setenv("SLUICE_CPU_ACTIVATIONS", "bf16", 1);
  auto refused = CreateBackend(BackendOptions{});
  unsetenv("SLUICE_CPU_ACTIVATIONS");
  ASSERT_TRUE(f32.ok());
  EXPECT_EQ((*f32)->InnerActivationDType(DType::kBF16), DType::kF32);
  EXPECT_EQ((*f32)->InnerActivationDType(DType::kI8), DType::kF32);
  EXPECT_NE((*f32)->Describe().find("inner activations f32"), std::string::npos);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("SLUICE_CPU_ACTIVATIONS=bf16"), std::string::npos)
      << refused.status().message();
}

// SLUICE_CPU_AMX_KERNEL / SLUICE_CPU_AMX_TILES set the AMX GEMM's schedule and blocking
// (process-wide, shown on the backend line); other values are refused, naming them. (Every
// schedule and blocking gives the same bits: AmxGemm.*KernelsGiveTheSameBits.)
TEST(CpuBackend, AmxScheduleFromEnvironment) {
  setenv("SLUICE_CPU_AMX_KERNEL", "2x2", 1);
  setenv("SLUICE_CPU_AMX_TILES", "64:8:2048", 1);
  auto be = CreateBackend(BackendOptions{});
  const cpu::x86::AmxKernel kernel = cpu::x86::CurrentAmxKernel(true);
  const cpu::x86::AmxTuning tune = cpu::x86::CurrentAmxTuning();
  const std::string line = be.ok() ? (*be)->Describe() : "";
  cpu::x86::ResetAmxKernelForTesting();
  cpu::x86::ResetAmxTuningForTesting();
  setenv("SLUICE_CPU_AMX_KERNEL", "4x4", 1);
  auto bad_kernel = CreateBackend(BackendOptions{});
  setenv("SLUICE_CPU_AMX_KERNEL", "", 1);
  setenv("SLUICE_CPU_AMX_TILES", "64:9:2048", 1);
  auto bad_tiles = CreateBackend(BackendOptions{});
  setenv("SLUICE_CPU_AMX_TILES", "64:8:2048:noepi", 1);
  auto no_epilogue = CreateBackend(BackendOptions{});
  setenv("SLUICE_CPU_AMX_TILES", "64:8:2048:t1", 1);
  auto bad_flag = CreateBackend(BackendOptions{});
  unsetenv("SLUICE_CPU_AMX_TILES");
  setenv("SLUICE_CPU_AMX_INT8_A", "rows", 1);  // the default is tiles
  auto rows = CreateBackend(BackendOptions{});
  const bool tiled = cpu::x86::AmxI8TiledA();
  const std::string rows_line = rows.ok() ? (*rows)->Describe() : "";
  cpu::x86::ResetAmxI8TiledAForTesting();
  setenv("SLUICE_CPU_AMX_INT8_A", "cols", 1);
  auto bad_layout = CreateBackend(BackendOptions{});
  unsetenv("SLUICE_CPU_AMX_INT8_A");

  unsetenv("SLUICE_CPU_AMX_KERNEL");
  unsetenv("SLUICE_CPU_AMX_TILES");
  cpu::x86::ResetAmxKernelForTesting();
  cpu::x86::ResetAmxTuningForTesting();
  ASSERT_TRUE(be.ok()) << be.status().ToString();
  EXPECT_EQ(kernel, cpu::x86::AmxKernel::k2x2);
  EXPECT_EQ(tune.chunk, 64);
  EXPECT_EQ(tune.tile_group, 8);
  EXPECT_EQ(tune.l2_bytes, 2048 << 10);
  EXPECT_NE(line.find("amx kernel 2x2, amx tiles 64:8:2048"), std::string::npos) << line;
  ASSERT_FALSE(bad_kernel.ok());
  EXPECT_NE(bad_kernel.status().message().find("SLUICE_CPU_AMX_KERNEL=4x4"), std::string::npos);
  ASSERT_FALSE(bad_tiles.ok());
  EXPECT_NE(bad_tiles.status().message().find("SLUICE_CPU_AMX_TILES=64:9:2048"), std::string::npos);
  EXPECT_FALSE(no_epilogue.ok());  // benchmarks only
  EXPECT_FALSE(bad_flag.ok());
  ASSERT_TRUE(rows.ok()) << rows.status().ToString();
  EXPECT_FALSE(tiled);
  EXPECT_NE(rows_line.find("amx int8 activations rows"), std::string::npos) << rows_line;
  ASSERT_FALSE(bad_layout.ok());
  EXPECT_NE(bad_layout.status().message().find("SLUICE_CPU_AMX_INT8_A=cols"), std::string::npos);
  auto plain = CreateBackend(BackendOptions{});
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ((*plain)->Describe().find("amx kernel"), std::string::npos);
  EXPECT_EQ((*plain)->Describe().find("amx tiles"), std::string::npos);
  EXPECT_EQ((*plain)->Describe().find("amx int8 activations"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Paths, CpuLinear,
                         ::testing::Values("auto", "sluice", "avx512bf16", "avx512fma", "onednn",
                                           "amx"));

// The ISA cap (SLUICE_CPU_MAX_ISA / ONEDNN_MAX_CPU_ISA) turns the AVX-512 kernels off, and
// forcing the AVX512-BF16 path without the ISA is refused, not silently replaced.
TEST(CpuLinearIsa, CapDisablesAvx512Paths) {
  cpu::SetMaxIsaForTesting("avx2");
  EXPECT_FALSE(cpu::Features().avx512);
  EXPECT_FALSE(cpu::Features().avx512_bf16);
  EXPECT_FALSE(cpu::Features().avx512_vnni);
  EXPECT_FALSE(cpu::Features().amx_tile);
  auto be = MakeCpu();
  auto w = Random(32 * 16, 1);
  HostTensor hw{w.data(), DType::kF32, {32, 16}, "w"};
  cpu::LinearRunner::SetPathForTesting("avx512bf16");
  auto lw = be->PrepareLinear(hw, nullptr, DType::kBF16);
  EXPECT_FALSE(lw.ok());
  EXPECT_NE(lw.status().message().find("AVX512-BF16"), std::string::npos) << lw.status().ToString();
  cpu::LinearRunner::SetPathForTesting("bogus");
  EXPECT_FALSE(be->PrepareLinear(hw, nullptr, DType::kF32).ok());
  cpu::LinearRunner::SetPathForTesting("");
  cpu::SetMaxIsaForTesting("");
  // Back to the environment's cap (none unless a run emulates a smaller CPU).
  if (!std::getenv("SLUICE_CPU_MAX_ISA") && !std::getenv("ONEDNN_MAX_CPU_ISA") &&
      !std::getenv("DNNL_MAX_CPU_ISA")) {
    EXPECT_EQ(cpu::Features().avx512_bf16, cpu::RawFeatures().avx512_bf16);
  }
}

// sluice's GEMM on every SIMD target this machine supports (AVX2 where AVX-512 is the
// default, and so on): matches the reference and is batch invariant on each.
TEST(CpuLinearTargets, EverySupportedTarget) {
  cpu::LinearRunner::SetPathForTesting("sluice");
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  int tested = 0;
  for (int64_t rest = targets; rest != 0; rest &= rest - 1) {
    const int64_t target = rest & -rest;
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    auto be = MakeCpu();
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      for (int64_t m : {1, 7, 13, 40}) {
        CheckLinear(*be, dtype, {m, 67, 37, true, Activation::kGeluErf, true}, true);
      }
      CheckBatchInvariance(dtype, 96, 40, AllM(50));
    }
    ++tested;
  }
  hwy::SetSupportedTargetsForTest(0);
  cpu::LinearRunner::SetPathForTesting("");
  EXPECT_GE(tested, 1);
}

}  // namespace
}  // namespace sluice
