// sluice's hand-written x86 GEMM kernels for Linear layers: AVX512-BF16 (vdpbf16ps) and
// int8 (AVX512-VNNI vpdpbusd, with a portable fallback that gives the same integers).
// Chosen at run time from Features() (cpu_features.h); nothing here requires AVX-512 to
// be present unless a *Avx512* entry point is called.
//
// out[m, n] = act(sum_k x[m, k] * w[n, k] (* scales) + bias[n]) (+ out[m, n] when `sum`),
// with the epilogue of gemm.h (gemm::Epilogue) applied per micro-tile.
//
// Batch invariance (DESIGN.md principle 3): each output element is one accumulator lane
// that runs over K in a fixed order (k pairs for bf16: vdpbf16ps adds the odd then the
// even product, each exact in f32; k quads for int8: exact integer sums), whatever M, the
// row's tile or the thread count. K is never split. So a row's result never depends on M.
//
// Weights are packed once, at load, into blocks of kBlockN = 64 output columns:
//   bf16: block b, k pair p: 64 columns x 2 bf16 (w[c, 2p], w[c, 2p + 1]) = one 64-byte
//         row per 16 columns, i.e. 4 zmm per k pair; K padded with zeros (KPairs).
//   int8: block b, k quad q: 64 columns x 4 int8 (w[c, 4q .. 4q + 3]); K padded to a
//         multiple of 64 (KQuads). Per-channel symmetric scales (max |w[c, :]| / 127).
// Activations are converted per call: bf16 (RNE) rows of 2 * KPairs(k) elements, or
// int8 per-token symmetric (scale max |x[m, :]| / 127, round to nearest even), stored as
// unsigned q + 128 (vpdpbusd multiplies unsigned by signed bytes; the 128 * column sum
// is subtracted in the epilogue, exactly).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/cpu/gemm.h"

namespace sluice::cpu::x86 {

constexpr int64_t kBlockN = 64;
inline int64_t Blocks(int64_t n) { return (n + kBlockN - 1) / kBlockN; }
// K is padded with zeros to a multiple of 32 (bf16) or 64 (int8): one AMX tile row, so
// that the AMX kernels can read the same packed weights (zero terms add exactly 0).
inline int64_t KPairs(int64_t k) { return (k + 31) / 32 * 16; }
inline int64_t KQuads(int64_t k) { return (k + 63) / 64 * 16; }

// ---- bf16 (requires Features().avx512_bf16 for GemmBf16) ----
// uint16_t elements of a packed bf16 weight.
inline int64_t PackedBf16Size(int64_t n, int64_t k) { return Blocks(n) * KPairs(k) * kBlockN * 2; }
// w: [n, k] row-major f32 (torch's Linear layout).
void PackBf16(const float* w, int64_t n, int64_t k, uint16_t* packed);
// x [m, k] (row stride ldx) -> xb [m, 2 * KPairs(k)] bf16 (RNE), zero padded.
void ConvertBf16(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* xb);

// x [m, k] -> xr [m, 2 * KPairs(k)] f32 holding bf16-rounded values (RNE), zero padded:
// the activations of the FMA kernel. Requires Features().avx512.
void RoundBf16(const float* x, int64_t ldx, int64_t m, int64_t k, float* xr);

// Two micro-kernels read the same packed weights:
//   kDpbf16: vdpbf16ps on bf16 activations (ConvertBf16). Requires avx512_bf16.
//   kFma: weights widened to f32 in registers, f32 FMA on bf16-rounded f32 activations
//         (RoundBf16). Requires avx512. Faster where vdpbf16ps issues at half the FMA rate.
// Both: products exact, f32 accumulation over k in order (their roundings differ).
enum class Bf16Kernel { kDpbf16, kFma };

struct Bf16Args {
  Bf16Kernel kernel = Bf16Kernel::kDpbf16;
  const void* x = nullptr;  // ConvertBf16 (uint16_t) or RoundBf16 (float); 2 * KPairs(k) a row
  // Elements between rows of x; 0 = 2 * KPairs(k). Larger only for bf16 rows whose k is
  // a multiple of 32 (the kernels read 2 * KPairs(k) elements of each row).
  int64_t ldx = 0;
  int64_t m = 0, k = 0, n = 0;
  const uint16_t* packed = nullptr;  // from PackBf16
  const float* bias = nullptr;       // [n] or null
  Activation act = Activation::kNone;
  bool sum = false;
  float* out = nullptr;
  int64_t ldo = 0;
  uint16_t* out16 = nullptr;  // bf16 output instead of out (gemm::EpilogueArgs::out16)
};
// Runs on the calling thread's OpenMP team.
void GemmBf16(const Bf16Args& a);

// ---- int8 ----
inline int64_t PackedI8Size(int64_t n, int64_t k) { return Blocks(n) * KQuads(k) * kBlockN * 4; }
// scale, colsum [Blocks(n) * 64]: per-channel weight scales and sums of the int8 weights
// (padded columns 0).
void PackI8(const float* w, int64_t n, int64_t k, int8_t* packed, float* scale, int32_t* colsum);
// x [m, k] -> xq [m, 4 * KQuads(k)] (q + 128 as uint8, zero padded as 128), scale[m].
void QuantizeI8(const float* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq, float* scale);
// The same from bf16 rows (the quantisation of their exact f32 values).
void QuantizeI8(const uint16_t* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq, float* scale);
// The same bytes and scales in the AMX A-tile layout (I8Args::x_tiles): row tile t (rows
// 16t .. 16t + 15) and k step s (k groups 16s .. 16s + 15, 64 bytes of each row) are one
// contiguous 1 KB tile at xq + (t * KQuads(k) / 16 + s) * 1024, row i of it at + 64 i. Rows
// past m up to the next multiple of 16 are 128 (int8 0). xq: QuantizedTilesSize(m, k) bytes.
inline int64_t QuantizedTilesSize(int64_t m, int64_t k) {
  return (m + 15) / 16 * 16 * 4 * KQuads(k);
}
void QuantizeI8Tiles(const float* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq, float* scale);
void QuantizeI8Tiles(const uint16_t* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq,
                     float* scale);

struct I8Args {
  const uint8_t* x = nullptr;  // from QuantizeI8; row stride 4 * KQuads(k)
  // x is from QuantizeI8Tiles instead (the AMX A-tile layout): GemmI8Amx only.
  bool x_tiles = false;
  const float* x_scale = nullptr;
  int64_t m = 0, k = 0, n = 0;
  const int8_t* packed = nullptr;
  const float* w_scale = nullptr;
  const int32_t* colsum = nullptr;
  const float* bias = nullptr;
  Activation act = Activation::kNone;
  bool sum = false;
  float* out = nullptr;
  int64_t ldo = 0;
  uint16_t* out16 = nullptr;  // bf16 output instead of out (gemm::EpilogueArgs::out16)
};
// VNNI where Features().avx512_vnni, else portable code: the same integer sums, so the
// same output bits on every machine (up to the epilogue's SIMD target).
void GemmI8(const I8Args& a);
// Which int8 kernel GemmI8 runs: "avx512_vnni" or "portable".
const char* I8KernelName();

// gemm::Epilogue for rows r0 .. r0 + rows - 1 and columns c0 .. c0 + cols - 1 of a plan's
// output (acc: [rows][kBlockN] f32), for the drivers' plans (gemm_x86.cc's Plan and
// gemm_amx_inl.h's AmxPlan: x_scale, w_scale, bias, act, sum, out, ldo).
// int8 plans may pass the integer sums instead (iacc [rows][kBlockN], with the columns' sums
// colsum: gemm::EpilogueArgs::iacc), and acc null.
template <class P>
void PlanEpilogue(const P& p, const float* acc, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                  const int32_t* iacc = nullptr, const int32_t* colsum = nullptr) {
  gemm::EpilogueArgs e;
  e.acc = acc;
  e.iacc = iacc;
  e.colsum = colsum;
  e.ldacc = kBlockN;
  e.rows = rows;
  e.cols = cols;
  e.row_scale = p.x_scale ? p.x_scale + r0 : nullptr;
  e.col_scale = p.w_scale ? p.w_scale + c0 : nullptr;
  e.bias = p.bias ? p.bias + c0 : nullptr;
  e.act = p.act;
  e.sum = p.sum;
  e.out = p.out16 ? nullptr : p.out + r0 * p.ldo + c0;
  e.out16 = p.out16 ? p.out16 + r0 * p.ldo + c0 : nullptr;
  e.ldo = p.ldo;
  gemm::Epilogue(e);
}

// ---- AMX (gemm_amx.cc): the same packed weights and activations, on tiles ----
// Tiles of 16 rows x 64 columns (4 accumulator tiles), k in 16-group (one tile row) steps
// in order, K never split (chunks of K reload the exact accumulators); a partial last row
// tile runs as a zero-padded 16-row tile. Shown as "bf16 sluice-amx" / "int8 sluice-int8(amx)". So
// a row's result does not depend on M, its tile or the thread count (bf16: products exact,
// f32 accumulation in the hardware's order, which may differ from vdpbf16ps's rounding;
// int8: the same integers as GemmI8, so the same output bits).
// Where the CPU (after the ISA cap) has AMX-BF16 / AMX-INT8 and Linux granted the tile
// state (amx.h); false elsewhere, and then no AMX instruction ever runs.
bool AmxBf16Usable();
bool AmxI8Usable();
// a.kernel must be kDpbf16 (ConvertBf16 activations). Requires AmxBf16Usable() (aborts
// otherwise). Runs on the calling thread's OpenMP team; each thread loads its own tile
// configuration and releases it.
void GemmBf16Amx(const Bf16Args& a);
// Requires AmxI8Usable() (aborts otherwise).
void GemmI8Amx(const I8Args& a);

// The tile schedule GemmBf16Amx / GemmI8Amx run. Every choice gives the same bits (each
// output element is one accumulator lane run over the k groups in order from zero):
//   k1x4: one A tile against the four B tiles of a 64-column block, K in chunks of 128
//         groups with the accumulators stored and reloaded between chunks;
//   k2x2: two A tiles (32 rows) against two B tiles (32 columns), the accumulators held
//         in tiles over the whole of K (a lone last row tile runs as k1x4, unchunked);
//   k2x2Prefetch: k2x2, with the next step's B rows prefetched into L1.
// Default: k2x2 for int8, k1x4 for bf16 (measured, gemm_amx.cc).
enum class AmxKernel { k1x4, k2x2, k2x2Prefetch };
AmxKernel CurrentAmxKernel(bool int8);
// Whether SetAmxKernelForTesting (SLUICE_CPU_AMX_KERNEL) chose one schedule for both.
bool AmxKernelOverridden();
const char* AmxKernelName(AmxKernel k);
// For benchmarks and tests: process-wide (both dtypes), not synchronised with running
// GEMMs; Reset goes back to the defaults.
void SetAmxKernelForTesting(AmxKernel k);
void ResetAmxKernelForTesting();
// Whether int8 Linear layers on the AMX path quantise their activations into the A-tile
// layout (QuantizeI8Tiles: each tile load reads 1 KB of consecutive bytes) rather than rows
// (16 rows 4 * KQuads(k) bytes apart). The same bits either way. Process-wide;
// SLUICE_CPU_AMX_INT8_A=rows|tiles (cpu_backend.cc) sets it.
// Default: tiles (measured: level in the GEMMs, 1-10% ahead end to end on BERT-base;
// docs/benchmarks.md, run 9).
constexpr bool kAmxI8TiledADefault = true;
bool AmxI8TiledA();
void SetAmxI8TiledAForTesting(bool tiles);
void ResetAmxI8TiledAForTesting();

// The AMX drivers' blocking (gemm_amx_inl.h). None of it changes a result's bits: K chunks
// store and reload the exact accumulators, and the tiles only decide which thread computes
// an element. Benchmarks sweep it (linear_paths_bench / forward_bench --amx-tune).
struct AmxTuning {
  int64_t chunk = 128;         // k groups per K chunk of the 1x4 schedule (a multiple of 16)
  int64_t tile_group = 4;      // row tiles (16 rows each) per scheduling tile, 1..8
  int64_t l2_bytes = 1 << 20;  // packed weight bytes per scheduling tile (at most)
  bool epilogue = true;        // false skips the epilogue: benchmarks only (output not written)
};
AmxTuning CurrentAmxTuning();
// "CHUNK:GROUP:L2KB[:noepi]" (e.g. "128:4:1024"); false on malformed or out-of-range input.
bool ParseAmxTuning(const char* s, AmxTuning* t);
// For benchmarks and tests: process-wide, not synchronised with running GEMMs.
void SetAmxTuningForTesting(const AmxTuning& t);
void ResetAmxTuningForTesting();

}  // namespace sluice::cpu::x86
