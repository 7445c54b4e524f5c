#include "backend/cpu/amx.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_features.h"

namespace sluice::cpu::amx {

bool Available() { return Features().amx_tile && RequestAmxPermission(); }

#pragma GCC push_options
#pragma GCC target("amx-tile,amx-bf16,amx-int8")
namespace {

// The 64-byte tile configuration of ldtilecfg (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

void ConfigureSquareTiles() {
  TileConfig c;
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  // Not _tile_loadconfig: GCC 12's version tells the compiler it reads only 8 bytes of the
  // configuration, so the other stores to `c` could be dropped as dead.
  __asm__ volatile("ldtilecfg %0" ::"m"(c));
}

namespace {

// tdpbusd (int8) or tdpbf16ps (bf16) on tiles C += A x B; the intrinsics take literal tile
// numbers, hence a macro (used inside templates on kInt8 only).
#define SLUICE_AMX_DP(C, A, B) \
  do {                         \
    if constexpr (kInt8) {     \
      _tile_dpbusd(C, A, B);   \
    } else {                   \
      _tile_dpbf16ps(C, A, B); \
    }                          \
  } while (0)

template <bool kInt8>
double PeakLoop(int64_t iters) {
  alignas(64) uint8_t buf[16 * 64];
  std::memset(buf, 0, sizeof(buf));
  alignas(64) float out[16 * 16];
  ConfigureSquareTiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, buf, 64);
  _tile_loadd(5, buf, 64);
  _tile_loadd(6, buf, 64);
  _tile_loadd(7, buf, 64);
  for (int64_t i = 0; i < iters; ++i) {
    SLUICE_AMX_DP(0, 4, 6);
    SLUICE_AMX_DP(1, 4, 7);
    SLUICE_AMX_DP(2, 5, 6);
    SLUICE_AMX_DP(3, 5, 7);
  }
  _tile_stored(0, out, 64);
  _tile_release();
  __asm__ volatile("" ::"r"(out[0]) : "memory");
  // Per instruction: 16 x 16 outputs x 32 (bf16) or 64 (int8) products, 2 ops each.
  return 4.0 * 16 * 16 * (kInt8 ? 64 : 32) * 2 * iters;
}

// The GEMM's schedules with their operand tiles loaded every step: 1x4 (one A tile, B tiles
// 5, 6, 7, 5 from a packed 4 KB weight step at a 256-byte row stride, as gemm_amx_inl.h's
// AmxMicroTile) or 2x2 (two A and two B tiles per step, as AmxMicro2x2). Each step takes the
// next A tile (2 KB for 2x2's pair) of a buffer of a_kb KiB and the next weight step of a
// buffer of b_kb KiB, wrapping around: the smallest buffers keep the operands in L1, larger
// ones put them in L2, L3 or memory (where the GEMM's tile loads find their operands bounds
// its speed: docs/benchmarks.md, runs 9-10).
// pf > 0: the operands of step i + pf are prefetched into L1 (prefetcht0, each line a tile
// load of that step will read) during step i.
template <bool kInt8, bool k2x2>
double LoadLoop(int64_t iters, int64_t a_kb, int64_t b_kb, int pf = 0) {
  const int64_t a_step = k2x2 ? 2048 : 1024;
  const int64_t na = std::max<int64_t>(1, (a_kb << 10) / a_step);
  const int64_t nb = std::max<int64_t>(1, (b_kb << 10) / 4096);
  static thread_local std::vector<uint8_t> buf;
  const size_t need = static_cast<size_t>(na * a_step + nb * 4096 + 64);
  if (buf.size() < need) buf.assign(need, 0);
  uint8_t* base = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
  const uint8_t* a = base;
  const uint8_t* b = base + na * a_step;
  alignas(64) float out[16 * 16];
  ConfigureSquareTiles();
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  int64_t ia = 0, ib = 0;
  for (int64_t i = 0; i < iters; ++i) {
    const uint8_t* ap = a + ia * a_step;
    const uint8_t* bp = b + ib * 4096;
    if (++ia == na) ia = 0;
    if (++ib == nb) ib = 0;
    if (pf > 0) {
      const uint8_t* an = a + (ia + pf - 1) % na * a_step;
      const uint8_t* bn = b + (ib + pf - 1) % nb * 4096;
      for (int64_t l = 0; l < a_step; l += 64)
        _mm_prefetch(reinterpret_cast<const char*>(an + l), _MM_HINT_T0);
      for (int r = 0; r < 16; ++r) {
        const char* row = reinterpret_cast<const char*>(bn + r * 256);
        _mm_prefetch(row, _MM_HINT_T0);
        _mm_prefetch(row + 64, _MM_HINT_T0);
        if constexpr (!k2x2) {
          _mm_prefetch(row + 128, _MM_HINT_T0);
          _mm_prefetch(row + 192, _MM_HINT_T0);
        }
      }
    }
    __asm__ volatile("" ::: "memory");
    if constexpr (k2x2) {
      _tile_loadd(4, ap, 64);
      _tile_loadd(6, bp, 256);
      _tile_loadd(7, bp + 64, 256);
      _tile_loadd(5, ap + 1024, 64);
      SLUICE_AMX_DP(0, 4, 6);
      SLUICE_AMX_DP(1, 4, 7);
      SLUICE_AMX_DP(2, 5, 6);
      SLUICE_AMX_DP(3, 5, 7);
    } else {
      _tile_loadd(4, ap, 64);
      _tile_loadd(5, bp, 256);
      SLUICE_AMX_DP(0, 4, 5);
      _tile_loadd(6, bp + 64, 256);
      SLUICE_AMX_DP(1, 4, 6);
      _tile_loadd(7, bp + 128, 256);
      SLUICE_AMX_DP(2, 4, 7);
      _tile_loadd(5, bp + 192, 256);
      SLUICE_AMX_DP(3, 4, 5);
    }
  }
  _tile_stored(0, out, 64);
  _tile_release();
  __asm__ volatile("" ::"r"(out[0]) : "memory");
  return 4.0 * 16 * 16 * (kInt8 ? 64 : 32) * 2 * iters;
}
#undef SLUICE_AMX_DP

}  // namespace

double PeakLoopBf16(int64_t iters) { return PeakLoop<false>(iters); }
double PeakLoopInt8(int64_t iters) { return PeakLoop<true>(iters); }
// From L1: one A tile (a pair for 2x2) and one 4 KB weight step.
double LoadLoopBf16(int64_t iters, bool two_by_two) {
  return two_by_two ? LoadLoop<false, true>(iters, 2, 4) : LoadLoop<false, false>(iters, 1, 4);
}
double LoadLoopInt8(int64_t iters, bool two_by_two) {
  return two_by_two ? LoadLoop<true, true>(iters, 2, 4) : LoadLoop<true, false>(iters, 1, 4);
}
double FootprintLoopInt8(int64_t iters, bool two_by_two, int64_t a_kb, int64_t b_kb, int prefetch) {
  return two_by_two ? LoadLoop<true, true>(iters, a_kb, b_kb, prefetch)
                    : LoadLoop<true, false>(iters, a_kb, b_kb, prefetch);
}
#pragma GCC pop_options

}  // namespace sluice::cpu::amx
