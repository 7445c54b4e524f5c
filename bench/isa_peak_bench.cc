// Peak multiply-add throughput of this CPU's matrix instructions, measured with
// micro-kernels of our own (register-resident operands, independent accumulators), per
// thread count: f32 FMA (AVX2 ymm, AVX-512 zmm), AVX512-BF16 vdpbf16ps, AVX512-VNNI
// vpdpbusd, and AMX tdpbf16ps / tdpbssd (tiles loaded once, 16x16x32 per instruction; and
// with the operand tiles loaded from L1 every step as the GEMM's 1x4 and 2x2 schedules do;
// and int8 with the operands walking through buffers sized for L1, L2, L3 and memory).
// Rows are skipped (n/a) where the CPU, the OS or the ISA cap lacks the feature. This is
// the hardware limit that docs/benchmarks.md compares GEMMs against (issue 19 item 1).
//
// Usage: isa_peak_bench [--threads 1,2] [--seconds S]
// Prints GFLOP/s (int8: GOP/s) per thread count, median of 5 samples (min..max).
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/cpu_features.h"

namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Each kernel runs `iters` iterations and returns the flops (2 per multiply-add) it did.
// The accumulators stay in registers (no asm barrier inside the loop: a multiply-add of
// constants into an accumulator cannot be folded without -ffast-math).
using Kernel = double (*)(int64_t iters);

#pragma GCC push_options
#pragma GCC target("avx2,fma")
__attribute__((noinline)) double FmaAvx2(int64_t iters) {
  __m256 a[12];
  for (int i = 0; i < 12; ++i) a[i] = _mm256_set1_ps(0.f);
  const __m256 x = _mm256_set1_ps(1e-7f), y = _mm256_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 12; ++i) a[i] = _mm256_fmadd_ps(x, y, a[i]);
  }
  float s = 0;
  for (int i = 0; i < 12; ++i) s += _mm256_cvtss_f32(a[i]);
  __asm__ volatile("" ::"x"(s));
  return 2.0 * 8 * 12 * iters;
}
#pragma GCC pop_options

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512bf16,avx512vnni,fma")
__attribute__((noinline)) double FmaAvx512(int64_t iters) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(0.f);
  const __m512 x = _mm512_set1_ps(1e-7f), y = _mm512_set1_ps(1e-7f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 16; ++i) a[i] = _mm512_fmadd_ps(x, y, a[i]);
  }
  float s = 0;
  for (int i = 0; i < 16; ++i) s += _mm512_reduce_add_ps(a[i]);
  __asm__ volatile("" ::"v"(s));
  return 2.0 * 16 * 16 * iters;
}

__attribute__((noinline)) double Dpbf16(int64_t iters) {
  __m512 a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_set1_ps(0.f);
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3380), y = x;
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbf16_ps(a[i], x, y);
  }
  float s = 0;
  for (int i = 0; i < 16; ++i) s += _mm512_reduce_add_ps(a[i]);
  __asm__ volatile("" ::"v"(s));
  return 2.0 * 32 * 16 * iters;  // 16 lanes x 2 products
}

__attribute__((noinline)) double Vnni(int64_t iters) {
  __m512i a[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm512_setzero_si512();
  const __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(1);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < 16; ++i) a[i] = _mm512_dpbusd_epi32(a[i], x, y);
  }
  int64_t s = 0;
  for (int i = 0; i < 16; ++i) s += _mm512_reduce_add_epi32(a[i]);
  __asm__ volatile("" ::"r"(s));
  return 2.0 * 64 * 16 * iters;  // 16 lanes x 4 products
}
#pragma GCC pop_options
#pragma GCC diagnostic pop

double AmxBf16(int64_t iters) { return sluice::cpu::amx::PeakLoopBf16(iters); }
double AmxInt8(int64_t iters) { return sluice::cpu::amx::PeakLoopInt8(iters); }
double AmxBf16L1x4(int64_t iters) { return sluice::cpu::amx::LoadLoopBf16(iters, false); }
double AmxBf16L2x2(int64_t iters) { return sluice::cpu::amx::LoadLoopBf16(iters, true); }
double AmxInt8L1x4(int64_t iters) { return sluice::cpu::amx::LoadLoopInt8(iters, false); }
double AmxInt8L2x2(int64_t iters) { return sluice::cpu::amx::LoadLoopInt8(iters, true); }
template <bool k2x2, int kAKb, int kBKb, int kPf = 0>
double AmxInt8Fp(int64_t iters) {
  return sluice::cpu::amx::FootprintLoopInt8(iters, k2x2, kAKb, kBKb, kPf);
}

struct Row {
  const char* name;
  Kernel fn;
  bool available;
  int64_t iters;  // per call, ~1-10 ms
};

std::string Measure(const Row& r, int threads, double seconds) {
  if (!r.available) return "n/a";
  std::vector<double> g;
  for (int s = 0; s < 5; ++s) {
    double flops = 0;
    const double t0 = Now();
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    {
      const double until = t0 + seconds / 5;
      while (Now() < until) flops += r.fn(r.iters);
    }
    g.push_back(flops / (Now() - t0) / 1e9);
  }
  std::sort(g.begin(), g.end());
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.0f (%.0f..%.0f)", g[2], g[0], g[4]);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string threads_arg = "1,2";
  double seconds = 1.0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) {
      threads_arg = argv[++i];
    } else if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  std::vector<int> threads;
  std::stringstream ss(threads_arg);
  for (std::string t; std::getline(ss, t, ',');) threads.push_back(std::atoi(t.c_str()));
  const auto& f = sluice::cpu::Features();
  const bool amx = sluice::cpu::amx::Available();
  const bool ai8 = amx && f.amx_int8;
  const Row rows[] = {
      {"f32 FMA (AVX2 ymm)", &FmaAvx2, f.avx2, 200000},
      {"f32 FMA (AVX-512 zmm)", &FmaAvx512, f.avx512, 200000},
      {"bf16 vdpbf16ps (zmm)", &Dpbf16, f.avx512_bf16, 200000},
      {"int8 vpdpbusd (zmm)", &Vnni, f.avx512_vnni, 200000},
      {"bf16 AMX tdpbf16ps", &AmxBf16, amx && f.amx_bf16, 100000},
      {"int8 AMX tdpbssd", &AmxInt8, amx && f.amx_int8, 100000},
      {"bf16 AMX, 1x4 tile loads from L1", &AmxBf16L1x4, amx && f.amx_bf16, 50000},
      {"bf16 AMX, 2x2 tile loads from L1", &AmxBf16L2x2, amx && f.amx_bf16, 50000},
      {"int8 AMX, 1x4 tile loads from L1", &AmxInt8L1x4, amx && f.amx_int8, 50000},
      {"int8 AMX, 2x2 tile loads from L1", &AmxInt8L2x2, amx && f.amx_int8, 50000},
      // Operands walking through buffers (A KiB, weights KiB): L1, L2, L3 sizes.
      {"int8 AMX 1x4, A 8 KB, B 16 KB", &AmxInt8Fp<false, 8, 16>, ai8, 50000},
      {"int8 AMX 1x4, A 8 KB, B 512 KB", &AmxInt8Fp<false, 8, 512>, ai8, 50000},
      {"int8 AMX 1x4, A 512 KB, B 16 KB", &AmxInt8Fp<false, 512, 16>, ai8, 50000},
      {"int8 AMX 1x4, A 512 KB, B 512 KB", &AmxInt8Fp<false, 512, 512>, ai8, 50000},
      {"int8 AMX 1x4, A 64 MB, B 64 MB", &AmxInt8Fp<false, 65536, 65536>, ai8, 20000},
      {"int8 AMX 2x2, A 16 KB, B 16 KB", &AmxInt8Fp<true, 16, 16>, ai8, 50000},
      {"int8 AMX 2x2, A 16 KB, B 512 KB", &AmxInt8Fp<true, 16, 512>, ai8, 50000},
      {"int8 AMX 2x2, A 512 KB, B 16 KB", &AmxInt8Fp<true, 512, 16>, ai8, 50000},
      {"int8 AMX 2x2, A 512 KB, B 512 KB", &AmxInt8Fp<true, 512, 512>, ai8, 50000},
      {"int8 AMX 2x2, A 64 MB, B 64 MB", &AmxInt8Fp<true, 65536, 65536>, ai8, 20000},
      // The same with the operands of the step 2, 4 or 8 ahead prefetched into L1.
      {"int8 AMX 1x4, A 512 KB, B 512 KB, prefetch 2", &AmxInt8Fp<false, 512, 512, 2>, ai8, 50000},
      {"int8 AMX 1x4, A 512 KB, B 512 KB, prefetch 4", &AmxInt8Fp<false, 512, 512, 4>, ai8, 50000},
      {"int8 AMX 2x2, A 16 KB, B 512 KB, prefetch 2", &AmxInt8Fp<true, 16, 512, 2>, ai8, 50000},
      {"int8 AMX 2x2, A 16 KB, B 512 KB, prefetch 4", &AmxInt8Fp<true, 16, 512, 4>, ai8, 50000},
      {"int8 AMX 2x2, A 512 KB, B 512 KB, prefetch 2", &AmxInt8Fp<true, 512, 512, 2>, ai8, 50000},
      {"int8 AMX 2x2, A 512 KB, B 512 KB, prefetch 4", &AmxInt8Fp<true, 512, 512, 4>, ai8, 50000},
      {"int8 AMX 2x2, A 512 KB, B 512 KB, prefetch 8", &AmxInt8Fp<true, 512, 512, 8>, ai8, 50000},
      {"int8 AMX 2x2, A 64 MB, B 64 MB, prefetch 4", &AmxInt8Fp<true, 65536, 65536, 4>, ai8,
       20000}};
  std::printf("features: %s; AMX usable: %s\n\n| instruction |",
              sluice::cpu::FeatureSummary().c_str(), amx ? "yes" : "no");
  for (int t : threads) std::printf(" %d thread%s |", t, t == 1 ? "" : "s");
  std::printf("\n|---|");
  for (size_t i = 0; i < threads.size(); ++i) std::printf("---|");
  std::printf("\n");
  for (const Row& r : rows) {
    std::printf("| %s |", r.name);
    for (int t : threads) std::printf(" %s |", Measure(r, t, seconds).c_str());
    std::printf("\n");
    std::fflush(stdout);
  }
  return 0;
}
