// Internal to gemm_amx.cc and its test: sluice's AMX GEMM (gemm_x86.h, GemmBf16Amx /
// GemmI8Amx) written once over a tile-operations policy `Ops`:
//   AmxHwOps (gemm_amx.cc): the real instructions (ldtilecfg, tileloadd, tdpbf16ps,
//     tdpbusd, tilestored), compiled for AMX; run only where amx::Available().
//   AmxEmuOps (below): the same operations in portable C++ after the ISA's pseudo-code,
//     so that the tile indexing, the M/N/K tails and the epilogue of the very same driver
//     run (and are tested) on machines without AMX.
// Everything here is in an anonymous namespace: each including file gets its own copies,
// so the AMX-compiled instantiations of gemm_amx.cc can never be picked by the linker for
// another file (no ODR sharing across target options).
//
// Tiles (palette 1, every tile 16 rows x 64 bytes):
//   0..3  accumulators C_j: 16 rows x 16 columns (f32 or int32), columns 16j..16j+15 of a
//         64-column weight block (gemm_x86.h kBlockN)
//   4     A: 16 activation rows x 16 k groups (k pairs of bf16 / k quads of uint8)
//   5..7  B: 16 k groups x 16 columns; B_j for C_j is tile 5, 6, 7, 5 (j = 0..3)
// (the 1x4 schedule; 2x2 uses A 4-5 and B 6-7).
// A tiles come from activation rows (16 rows, the row stride apart) or, for int8, from
// activations quantised into the A-tile layout (QuantizeI8Tiles: 1 KB per tile).
// The packed weights already are B tiles: k group g of block b is 256 bytes, 64 columns
// x 4 bytes, so B_j of the 16 groups from g is 16 rows of 64 bytes at w + g * 256 + 64 j,
// row stride 256. K is padded to 16 groups (gemm_x86.h KPairs / KQuads), so K steps by
// whole tiles and never splits.
//
// Batch invariance (DESIGN.md principle 3): each output element is one lane of one
// accumulator tile that runs over the k groups in order, 16 per instruction, with the
// same instructions for every row: a row tile always has 16 rows (the last rows of a batch
// are copied into a zero-padded 16-row buffer), so neither M, nor the row's position, nor
// the thread count changes the instruction sequence a row goes through. K runs in chunks
// (AmxTuning::chunk) with the accumulators stored and reloaded between them: bit copies, the same
// sequence. (This assumes, as for SIMD lanes, that a tile row's result does not depend on
// the row's index in the tile or on the other rows: the hardware tests check it.)
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/amx_emu_inl.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_x86.h"

namespace sluice::cpu::x86 {
namespace {

constexpr int64_t kAmxRows = 16;    // rows per A tile / row tile
constexpr int64_t kAmxGroups = 16;  // k groups per A tile (64 bytes)
// The B tile that pairs with accumulator j.
constexpr int AmxBTile(int j) { return j == 3 ? 5 : 5 + j; }

struct AmxPlan {
  bool int8 = false;
  const uint8_t* x = nullptr;  // ConvertBf16 or QuantizeI8 rows, or QuantizeI8Tiles tiles
  // A tile (row tile t, k step s = 16 k groups) at x + t * a_tile + s * a_step, its rows ldx
  // bytes apart: rows: ldx = 4 * groups (or more: Bf16Args::ldx), a_step 64, a_tile 16 ldx;
  // tiles (I8Args::x_tiles): ldx 64, a_step 1024, a_tile groups / 16 * 1024, and the rows
  // past m are already padding (no tail buffer).
  int64_t ldx = 0;
  int64_t a_step = 64;
  int64_t a_tile = 0;
  bool a_tiles = false;
  int64_t groups = 0;  // KPairs(k) or KQuads(k): a multiple of 16
  const uint8_t* packed = nullptr;
  const int32_t* colsum = nullptr;  // int8: [Blocks(n) * 64]
  const float* x_scale = nullptr;
  const float* w_scale = nullptr;
  const float* bias = nullptr;
  Activation act = Activation::kNone;
  bool sum = false;
  int64_t m = 0, n = 0;
  float* out = nullptr;
  int64_t ldo = 0;
  uint16_t* out16 = nullptr;
  AmxKernel kernel = AmxKernel::k1x4;
  AmxTuning tune = CurrentAmxTuning();
};

inline AmxPlan AmxPlanBf16(const Bf16Args& a) {
  AmxPlan p;
  p.x = static_cast<const uint8_t*>(a.x);
  p.groups = KPairs(a.k);
  p.ldx = a.ldx > 0 ? 2 * a.ldx : 4 * p.groups;
  p.a_tile = kAmxRows * p.ldx;
  p.packed = reinterpret_cast<const uint8_t*>(a.packed);
  p.bias = a.bias;
  p.act = a.act;
  p.sum = a.sum;
  p.m = a.m;
  p.n = a.n;
  p.out = a.out;
  p.out16 = a.out16;
  p.ldo = a.ldo;
  return p;
}

inline AmxPlan AmxPlanI8(const I8Args& a) {
  AmxPlan p;
  p.int8 = true;
  p.x = a.x;
  p.groups = KQuads(a.k);
  p.ldx = 4 * p.groups;
  p.a_tile = kAmxRows * p.ldx;
  if (a.x_tiles) {
    p.a_tiles = true;
    p.ldx = 64;
    p.a_step = 1024;
    p.a_tile = p.groups / kAmxGroups * 1024;
  }
  p.packed = reinterpret_cast<const uint8_t*>(a.packed);
  p.colsum = a.colsum;
  p.x_scale = a.x_scale;
  p.w_scale = a.w_scale;
  p.bias = a.bias;
  p.act = a.act;
  p.sum = a.sum;
  p.m = a.m;
  p.n = a.n;
  p.out = a.out;
  p.out16 = a.out16;
  p.ldo = a.ldo;
  return p;
}

// 16 rows (xa: the row tile's first A tile, row stride lda bytes, the next k step's tile
// a_step bytes on) x one 64-column weight block w, k groups [g0, g1)
// in order, onto acc [16, 64] (f32 for bf16, int32 for int8; row stride 256 bytes): the
// accumulators start at zero when g0 == 0, else are loaded from acc (a tile store and
// load copies the bits, so a K range split into chunks gives exactly the bits of one
// pass: the same instructions on each element in the same order).
template <class Ops>
void AmxMicroTile(const uint8_t* xa, int64_t lda, int64_t a_step, int64_t g0, int64_t g1,
                  const uint8_t* w, void* acc) {
  auto* a = static_cast<uint8_t*>(acc);
  if (g0 == 0) {
    Ops::ZeroAcc();
  } else {
    Ops::template LoadAcc<0>(a, 256);
    Ops::template LoadAcc<1>(a + 64, 256);
    Ops::template LoadAcc<2>(a + 128, 256);
    Ops::template LoadAcc<3>(a + 192, 256);
  }
  for (int64_t g = g0; g < g1; g += kAmxGroups) {
    Ops::LoadA(xa + g / kAmxGroups * a_step, lda);
    const uint8_t* wg = w + g * 256;
    Ops::template LoadB<0>(wg);
    Ops::template Dp<0>();
    Ops::template LoadB<1>(wg + 64);
    Ops::template Dp<1>();
    Ops::template LoadB<2>(wg + 128);
    Ops::template Dp<2>();
    Ops::template LoadB<3>(wg + 192);
    Ops::template Dp<3>();
  }
  Ops::template StoreAcc<0>(a, 256);
  Ops::template StoreAcc<1>(a + 64, 256);
  Ops::template StoreAcc<2>(a + 128, 256);
  Ops::template StoreAcc<3>(a + 192, 256);
}

// Row tile t's accumulators ia [16][64] (f32 bits for bf16, int32 for int8) for the
// columns c0 .. c0 + cols of block c0 / 64: the epilogue into p.out. int8: tdpbusd's
// integers minus 128 * column sum (q + 128 encoding), as the VNNI kernel, converted inside
// the epilogue's pass (gemm::EpilogueArgs::iacc).
inline void AmxTileEpilogue(const AmxPlan& p, int64_t t, int64_t c0, int64_t cols,
                            const int32_t* ia) {
  const int64_t r0 = t * kAmxRows;
  const int64_t rows = std::min<int64_t>(kAmxRows, p.m - r0);
  if (p.int8) {
    PlanEpilogue(p, nullptr, r0, rows, c0, cols, ia, p.colsum + c0);
  } else {
    PlanEpilogue(p, reinterpret_cast<const float*>(ia), r0, rows, c0, cols);  // f32 bits
  }
}

// The blocking (AmxTuning, gemm_x86.h): K chunks of tune.chunk k groups (by default 128:
// the weight block's chunk, 32 KB, stays in L1 while the row tiles of a tile pass over it;
// accumulators are spilled between chunks), tune.tile_group row tiles per scheduling tile
// (by default 4: 64 rows), at most kAmxMaxTileGroup.
constexpr int64_t kAmxMaxTileGroup = 8;

// The drivers' schedule: tiles of (tune.tile_group row tiles) x (pb weight blocks), and the
// last, partial row tile's rows in a 16-row buffer of this thread, the rest zero (bf16 0.0,
// uint8 128 = int8 0; those padding rows are computed and dropped).
struct AmxSchedule {
  int64_t blocks = 0, row_tiles = 0, block_bytes = 0, full_rows = 0;
  int64_t pb = 1, tiles_m = 0, tiles_n = 0, tile_group = 1;
  bool parallel = false;
  const uint8_t* tail_x = nullptr;
  // Row tile t's first A tile.
  const uint8_t* RowX(const AmxPlan& p, int64_t t) const {
    return p.a_tiles || t * kAmxRows < full_rows ? p.x + t * p.a_tile : tail_x;
  }
};

inline AmxSchedule AmxScheduleFor(const AmxPlan& p) {
  AmxSchedule s;
  s.blocks = Blocks(p.n);
  s.row_tiles = (p.m + kAmxRows - 1) / kAmxRows;
  s.block_bytes = p.groups * 256;
  s.full_rows = p.m / kAmxRows * kAmxRows;
  const int64_t tail_rows = p.m - s.full_rows;
  static thread_local std::vector<uint8_t> tail;
  if (tail_rows > 0 && !p.a_tiles) {
    tail.assign(kAmxRows * p.ldx, p.int8 ? 128 : 0);
    for (int64_t r = 0; r < tail_rows; ++r) {  // rows may be strided (Bf16Args::ldx)
      std::memcpy(tail.data() + r * p.ldx, p.x + (s.full_rows + r) * p.ldx, 4 * p.groups);
    }
  }
  s.tail_x = tail.data();
  s.tile_group = std::clamp<int64_t>(p.tune.tile_group, 1, kAmxMaxTileGroup);
  s.tiles_m = (s.row_tiles + s.tile_group - 1) / s.tile_group;
  s.pb = gemm::BlocksPerTile(s.blocks, p.tune.l2_bytes / s.block_bytes, s.tiles_m,
                             omp_get_max_threads());
  s.tiles_n = (s.blocks + s.pb - 1) / s.pb;
  s.parallel = p.m * p.n * p.groups >= (1 << 15) && s.tiles_m * s.tiles_n > 1;
  return s;
}

// Two row tiles (xa0, xa1: first A tiles as in AmxMicroTile) x 32 columns of a weight block (w: the
// block's first k group + 128 bytes for its second half), all k groups in order from
// zero, onto acc0 / acc1 (each [16][64] with a 256-byte row stride, pointing at the
// half's first column). Tiles: accumulators 0-3 (C[r][j] = 2r + j), A 4-5, B 6-7.
template <class Ops, bool kPrefetch>
void AmxMicro2x2(const uint8_t* xa0, const uint8_t* xa1, int64_t lda, int64_t a_step,
                 int64_t groups, const uint8_t* w, uint8_t* acc0, uint8_t* acc1) {
  Ops::ZeroAcc();
  for (int64_t g = 0; g < groups; g += kAmxGroups) {
    const uint8_t* wg = w + g * 256;
    if constexpr (kPrefetch) {
      if (g + kAmxGroups < groups) {  // the next step's 16 B rows: 2 lines each
        const uint8_t* nb = wg + kAmxGroups * 256;
        for (int r = 0; r < kAmxGroups; ++r) {
          __builtin_prefetch(nb + r * 256, 0, 3);
          __builtin_prefetch(nb + r * 256 + 64, 0, 3);
        }
      }
    }
    Ops::template Load<4>(xa0 + g / kAmxGroups * a_step, lda);
    Ops::template Load<6>(wg, 256);
    Ops::template DpTiles<0, 4, 6>();
    Ops::template Load<7>(wg + 64, 256);
    Ops::template DpTiles<1, 4, 7>();
    Ops::template Load<5>(xa1 + g / kAmxGroups * a_step, lda);
    Ops::template DpTiles<2, 5, 6>();
    Ops::template DpTiles<3, 5, 7>();
  }
  Ops::template StoreAcc<0>(acc0, 256);
  Ops::template StoreAcc<1>(acc0 + 64, 256);
  Ops::template StoreAcc<2>(acc1, 256);
  Ops::template StoreAcc<3>(acc1 + 64, 256);
}

// One weight block (w, its 64 columns) against row tiles t0 .. t_end - 1 of the plan, onto
// their accumulators accs ([t - t0][16][64]), with p.kernel's schedule:
//   k1x4: K in tune.chunk chunks, every row tile over each chunk while it is in L1;
//   k2x2 / k2x2Prefetch: each half (32 columns) against the row tiles in pairs, a lone last
//   row tile as AmxMicroTile over the whole of K.
// The same bits either way: every element is one lane over all k groups in order from zero.
template <class Ops>
void AmxBlock(const AmxPlan& p, const AmxSchedule& sc, const uint8_t* w, int64_t t0, int64_t t_end,
              int32_t* accs) {
  auto acc = [&](int64_t t) { return accs + (t - t0) * kAmxRows * kBlockN; };
  if (p.kernel == AmxKernel::k1x4) {
    const int64_t chunk = std::max<int64_t>(kAmxGroups, p.tune.chunk / kAmxGroups * kAmxGroups);
    for (int64_t g0 = 0; g0 < p.groups; g0 += chunk) {
      const int64_t g1 = std::min(p.groups, g0 + chunk);
      for (int64_t t = t0; t < t_end; ++t) {
        AmxMicroTile<Ops>(sc.RowX(p, t), p.ldx, p.a_step, g0, g1, w, acc(t));
      }
    }
    return;
  }
  const bool prefetch = p.kernel == AmxKernel::k2x2Prefetch;
  int64_t t = t0;
  for (; t + 1 < t_end; t += 2) {
    auto* a0 = reinterpret_cast<uint8_t*>(acc(t));
    auto* a1 = reinterpret_cast<uint8_t*>(acc(t + 1));
    for (int h = 0; h < 2; ++h) {
      if (prefetch) {
        AmxMicro2x2<Ops, true>(sc.RowX(p, t), sc.RowX(p, t + 1), p.ldx, p.a_step, p.groups,
                               w + 128 * h, a0 + 128 * h, a1 + 128 * h);
      } else {
        AmxMicro2x2<Ops, false>(sc.RowX(p, t), sc.RowX(p, t + 1), p.ldx, p.a_step, p.groups,
                                w + 128 * h, a0 + 128 * h, a1 + 128 * h);
      }
    }
  }
  if (t < t_end) AmxMicroTile<Ops>(sc.RowX(p, t), p.ldx, p.a_step, 0, p.groups, w, acc(t));
}

// The whole GEMM on the calling thread's OpenMP team. Tiles of (row-tile group) x
// (weight-block group) as in gemm_x86.cc's Drive; the schedule decides only which thread
// computes an element, never how. Each thread loads its tile configuration (Ops::Begin)
// and releases it (Ops::End).
template <class Ops>
void AmxDrive(const AmxPlan& p) {
  if (p.m <= 0 || p.n <= 0) return;
  const AmxSchedule sc = AmxScheduleFor(p);
#pragma omp parallel if (sc.parallel)
  {
    Ops::Begin();
    // Accumulators of the tile's row tiles: [tile_group][16][64] (f32 or int32).
    alignas(64) int32_t accs[kAmxMaxTileGroup * kAmxRows * kBlockN];
#pragma omp for collapse(2) schedule(static)
    for (int64_t tn = 0; tn < sc.tiles_n; ++tn) {
      for (int64_t tm = 0; tm < sc.tiles_m; ++tm) {
        const int64_t b_end = std::min(sc.blocks, (tn + 1) * sc.pb);
        const int64_t t0 = tm * sc.tile_group;
        const int64_t t_end = std::min(sc.row_tiles, t0 + sc.tile_group);
        for (int64_t b = tn * sc.pb; b < b_end; ++b) {
          const int64_t c0 = b * kBlockN;
          const int64_t cols = std::min<int64_t>(kBlockN, p.n - c0);
          AmxBlock<Ops>(p, sc, p.packed + b * sc.block_bytes, t0, t_end, accs);
          if (!p.tune.epilogue) continue;
          for (int64_t t = t0; t < t_end; ++t) {
            AmxTileEpilogue(p, t, c0, cols, accs + (t - t0) * kAmxRows * kBlockN);
          }
        }
      }
    }
    Ops::End();
  }
}

// Portable emulation of the tile operations above, after the pseudo-code of the Intel
// SDM (TILELOADD, TDPBF16PS, TDPBUSD, TILESTORED) for the configuration used here (every
// tile 16 x 64 bytes). Per thread, like the hardware's tile registers. For tests only:
// it checks the indexing of AmxMicroTile / AmxDrive, not the hardware's rounding.
// TDPBF16PS: per k pair, c += a[2k] * b[2k] then c += a[2k + 1] * b[2k + 1], each in f32
// with RNE (no fusion), bf16 denormal inputs as zero, denormal results flushed to zero.
template <bool kInt8>
struct AmxEmuOps {
  struct State {
    alignas(64) uint8_t t[8][kAmxRows * 64];
  };
  static State& S() {
    static thread_local State s;
    return s;
  }
  static void Begin() { std::memset(&S(), 0, sizeof(State)); }  // ldtilecfg zeroes tiles
  static void End() {}
  static void ZeroAcc() {
    for (int j = 0; j < 4; ++j) std::memset(S().t[j], 0, sizeof(S().t[j]));
  }
  static void Load(int tile, const void* p, int64_t stride) {
    for (int64_t r = 0; r < kAmxRows; ++r) {
      std::memcpy(S().t[tile] + r * 64, static_cast<const uint8_t*>(p) + r * stride, 64);
    }
  }
  static void LoadA(const void* p, int64_t stride) { Load(4, p, stride); }
  template <int J>
  static void LoadB(const void* p) {
    Load(AmxBTile(J), p, 256);
  }
  template <int J>
  static void LoadAcc(const void* p, int64_t stride) {
    Load(J, p, stride);
  }
  template <int J>
  static void Dp() {
    Dot(J, 4, AmxBTile(J));
  }
  static void Dot(int tc, int ta, int tb) {
    const uint8_t* a = S().t[ta];
    const uint8_t* b = S().t[tb];
    uint8_t* c = S().t[tc];
    if constexpr (!kInt8) {
      amx::EmuDotBf16(a, b, c);  // amx_emu_inl.h
    } else {                     // TDPBUSD: uint8 A x int8 B, int32 sums wrapping
      for (int m = 0; m < kAmxRows; ++m) {
        for (int n = 0; n < 16; ++n) {
          int32_t acc;
          std::memcpy(&acc, c + m * 64 + n * 4, 4);
          uint32_t s = static_cast<uint32_t>(acc);
          for (int k = 0; k < kAmxGroups; ++k) {
            for (int i = 0; i < 4; ++i) {
              const int32_t av = a[m * 64 + k * 4 + i];
              const int32_t bv = static_cast<int8_t>(b[k * 64 + n * 4 + i]);
              s += static_cast<uint32_t>(av * bv);
            }
          }
          acc = static_cast<int32_t>(s);
          std::memcpy(c + m * 64 + n * 4, &acc, 4);
        }
      }
    }
  }
  template <int J>
  static void StoreAcc(void* p, int64_t stride) {
    for (int64_t r = 0; r < kAmxRows; ++r) {
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, S().t[J] + r * 64, 64);
    }
  }
  template <int T>
  static void Load(const void* p, int64_t stride) {
    Load(T, p, stride);
  }
  template <int C, int A, int B>
  static void DpTiles() {
    static_assert(A >= 4 && A <= 5 && B >= 6 && B <= 7 && C == 2 * (A - 4) + (B - 6));
    Dot(C, A, B);
  }
};

}  // namespace
}  // namespace sluice::cpu::x86
