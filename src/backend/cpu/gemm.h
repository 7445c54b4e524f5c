// sluice's own batch-invariant GEMM for Linear layers (Highway SIMD, runtime dispatch).
//
// Used where oneDNN 2.6 has no batch-invariant kernel: its brgemm matmul needs AVX-512,
// and on AVX2 machines its fp32 matmul falls back to gemm:jit (a row's result changes
// with M) and bf16 has no implementation at all. cpu_linear.cc picks the path.
//
// out[m, n] = act(sum_k x[m, k] * w[n, k] + bias[n]) (+ out[m, n] when `sum`).
// Every output element is one f32 accumulator that runs over k = 0..K-1 in order (fused
// multiply-add), whatever M, the row's position in the batch, the tile it lands in or the
// thread count: rows are bit-identical alone and batched. K is never split.
//
// Weights are packed once into panels of kPanel output columns: panel p holds, for each
// k, the kPanel weights w[p * kPanel + j, k] contiguously (zero padded past N), as f32
// or bf16 (bf16 weights are widened exactly to f32 in the kernel; bf16 activations are
// rounded by the caller, so products are exact in f32 and accumulation is f32, as in
// oneDNN's bf16 matmul).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace sluice::cpu::gemm {

constexpr int64_t kPanel = 16;

inline int64_t Panels(int64_t n) { return (n + kPanel - 1) / kPanel; }
// Elements of a packed weight: Panels(n) * k * kPanel.
inline int64_t PackedSize(int64_t n, int64_t k) { return Panels(n) * k * kPanel; }

// w: [n, k] row-major f32 (torch's Linear layout).
void PackF32(const float* w, int64_t n, int64_t k, float* packed);
void PackBF16(const float* w, int64_t n, int64_t k, uint16_t* packed);

struct Args {
  const float* x = nullptr;  // [m, k], row stride ldx
  int64_t ldx = 0;
  int64_t m = 0, k = 0, n = 0;
  const void* packed = nullptr;  // float* or uint16_t* (bf16) from Pack*
  bool bf16 = false;
  const float* bias = nullptr;  // Panels(n) * kPanel floats (zero padded) or null
  Activation act = Activation::kNone;
  bool sum = false;  // add the existing out values after the activation
  float* out = nullptr;
  int64_t ldo = 0;
};

// Runs on the calling thread's OpenMP team.
void Run(const Args& a);

// Rows per micro-tile on the Highway target chosen at run time (for benchmarks).
int RowsPerTile();

// The epilogue shared by sluice's GEMM kernels (this one and gemm_x86.h's), so that every
// kernel applies bias, activation and residual with the same arithmetic:
// out[r, c] = act(acc[r, c] * (scale ? scale[r] * col_scale[c] : 1) + bias[c])
//             (+ out[r, c] when `sum`), for r < rows, c < cols, in f32 (rounded once to bf16
// at the end with out16). bias/col_scale/scale may be
// null (no bias; no scaling). Reads exactly `cols` elements of bias/col_scale/each row.
struct EpilogueArgs {
  const float* acc = nullptr;  // [rows, cols], row stride ldacc
  int64_t ldacc = 0;
  // int8 instead of acc: integer sums of (q + 128) x w [rows, cols] (row stride ldacc), from
  // which 128 * colsum[c] is subtracted (wrapping, exact for the kernels' ranges) before the
  // conversion to f32 (round to nearest even): the value acc would hold.
  const int32_t* iacc = nullptr;
  const int32_t* colsum = nullptr;
  int64_t rows = 0, cols = 0;
  const float* row_scale = nullptr;  // [rows] (int8: activation scales) or null
  const float* col_scale = nullptr;  // [cols] (int8: weight scales) or null
  const float* bias = nullptr;       // [cols] or null
  Activation act = Activation::kNone;
  bool sum = false;
  float* out = nullptr;
  int64_t ldo = 0;
  // When set, the output is bf16 here instead (rounded to nearest even, row stride ldo; `sum`
  // adds the bf16 values found there) and `out` is not used.
  uint16_t* out16 = nullptr;
};
void Epilogue(const EpilogueArgs& e);

// The weight blocks (or panels) per scheduling tile of the drivers (this GEMM's and
// gemm_x86.h's): at most max_blocks (a tile's weights stay in cache), fewer while there are
// under 4 tiles per thread, then spread evenly over that many tiles. Without the last step a
// remainder tile (e.g. 24 blocks as 21 + 3) left one thread with several times the other's
// work under the static schedule. Only which thread computes an element depends on this.
inline int64_t BlocksPerTile(int64_t blocks, int64_t max_blocks, int64_t tiles_m, int64_t threads) {
  if (blocks <= 0) return 1;
  int64_t pb = std::min(std::max<int64_t>(1, max_blocks), blocks);
  while (pb > 1 && tiles_m * ((blocks + pb - 1) / pb) < 4 * threads) pb = (pb + 1) / 2;
  const int64_t tiles_n = (blocks + pb - 1) / pb;
  return (blocks + tiles_n - 1) / tiles_n;
}

}  // namespace sluice::cpu::gemm
