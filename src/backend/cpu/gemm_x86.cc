// gemm_x86.h: packing, activation conversion, the tile scheduler and the portable int8
// kernel. The AVX-512 micro-kernels are in gemm_avx512.cc.
#include "backend/cpu/gemm_x86.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_features.h"
#include "backend/cpu/gemm.h"
#include "backend/cpu/gemm_x86_inl.h"
#include "core/dtype.h"

namespace sluice::cpu::x86 {
namespace {

// A micro-tile: rows (<= kRows) x 64 columns of one weight block -> acc [rows, 64] f32.
using TileFn = void (*)(const uint8_t* x, int64_t ldx, int64_t groups, const uint8_t* w, int rows,
                        const int32_t* colsum, float* acc);

struct Plan {
  const uint8_t* x = nullptr;
  int64_t ldx = 0;     // bytes
  int64_t groups = 0;  // k pairs (bf16) or k quads (int8); 256 bytes of weights each
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
  TileFn tile = nullptr;
};

// Tiles of (row-tile group) x (weight-block group): a group of weight blocks (<= ~1 MB)
// stays in L2 while up to 48 rows stream over it. Threads split the tiles statically.
// The schedule only decides which thread computes an element, never how.
void Drive(const Plan& p) {
  const int64_t blocks = Blocks(p.n);
  const int64_t row_tiles = (p.m + kRows - 1) / kRows;
  const int64_t block_bytes = p.groups * 256;
  const int64_t gb = 8;
  const int64_t tiles_m = (row_tiles + gb - 1) / gb;
  const int64_t pb =
      gemm::BlocksPerTile(blocks, (1 << 20) / block_bytes, tiles_m, omp_get_max_threads());
  const int64_t tiles_n = (blocks + pb - 1) / pb;
  const bool parallel = p.m * p.n * p.groups >= (1 << 15) && tiles_m * tiles_n > 1;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t tn = 0; tn < tiles_n; ++tn) {
    for (int64_t tm = 0; tm < tiles_m; ++tm) {
      alignas(64) float acc[kRows * kBlockN];
      const int64_t b_end = std::min(blocks, (tn + 1) * pb);
      const int64_t t_end = std::min(row_tiles, (tm + 1) * gb);
      for (int64_t b = tn * pb; b < b_end; ++b) {
        const int64_t c0 = b * kBlockN;
        const int64_t cols = std::min<int64_t>(kBlockN, p.n - c0);
        const uint8_t* w = p.packed + b * block_bytes;
        for (int64_t t = tm * gb; t < t_end; ++t) {
          const int64_t r0 = t * kRows;
          const int rows = static_cast<int>(std::min<int64_t>(kRows, p.m - r0));
          p.tile(p.x + r0 * p.ldx, p.ldx, p.groups, w, rows, p.colsum ? p.colsum + c0 : nullptr,
                 acc);
          PlanEpilogue(p, acc, r0, rows, c0, cols);
        }
      }
    }
  }
}

void TileBf16(const uint8_t* x, int64_t ldx, int64_t kp, const uint8_t* w, int rows, const int32_t*,
              float* acc) {
  avx512::TileBf16Any(x, ldx, kp, w, rows, acc);
}

void TileBf16Fma(const uint8_t* x, int64_t ldx, int64_t kp, const uint8_t* w, int rows,
                 const int32_t*, float* acc) {
  avx512::TileBf16FmaAny(x, ldx, kp, w, rows, acc);
}

void TileVnni(const uint8_t* x, int64_t ldx, int64_t kq, const uint8_t* w, int rows,
              const int32_t* colsum, float* acc) {
  avx512::TileVnniAny(x, ldx, kq, w, rows, colsum, acc);
}

// Portable int8: sum over k of (x - 128) * w in int32, the same integers as vpdpbusd
// minus 128 * colsum. Also compiled for AVX2 (chosen at load by cpuid): integer sums are
// exact, so both clones give the same integers. Still far below the f32 GEMM on AVX2-only
// CPUs (docs/benchmarks.md, "CPU int8"): int8 pays off on AVX512-VNNI CPUs.
__attribute__((target_clones("avx2", "default"))) void TileI8Portable(const uint8_t* x, int64_t ldx,
                                                                      int64_t kq, const uint8_t* w,
                                                                      int rows, const int32_t*,
                                                                      float* acc) {
  for (int r = 0; r < rows; ++r) {
    int32_t s[kBlockN] = {};
    const uint8_t* xr = x + r * ldx;
    for (int64_t q = 0; q < kq; ++q) {
      const int32_t a0 = xr[4 * q] - 128, a1 = xr[4 * q + 1] - 128, a2 = xr[4 * q + 2] - 128,
                    a3 = xr[4 * q + 3] - 128;
      const auto* wq = reinterpret_cast<const int8_t*>(w + q * 256);
      for (int c = 0; c < kBlockN; ++c) {
        s[c] += a0 * wq[4 * c] + a1 * wq[4 * c + 1] + a2 * wq[4 * c + 2] + a3 * wq[4 * c + 3];
      }
    }
    for (int c = 0; c < kBlockN; ++c) acc[r * kBlockN + c] = static_cast<float>(s[c]);
  }
}

}  // namespace

void PackBf16(const float* w, int64_t n, int64_t k, uint16_t* packed) {
  const int64_t blocks = Blocks(n), kp = KPairs(k);
#pragma omp parallel for schedule(static) if (n * k >= (1 << 20))
  for (int64_t b = 0; b < blocks; ++b) {
    uint16_t* dst = packed + b * kp * kBlockN * 2;
    for (int64_t p = 0; p < kp; ++p) {
      for (int64_t j = 0; j < kBlockN; ++j) {
        const int64_t col = b * kBlockN + j;
        for (int64_t h = 0; h < 2; ++h) {
          const int64_t kk = 2 * p + h;
          dst[(p * kBlockN + j) * 2 + h] = col < n && kk < k ? F32ToBF16(w[col * k + kk]) : 0;
        }
      }
    }
  }
}

void ConvertBf16(const float* x, int64_t ldx, int64_t m, int64_t k, uint16_t* xb) {
  const int64_t ld = 2 * KPairs(k);
  const bool simd = Features().avx512_bf16;
#pragma omp parallel for schedule(static) if (m * k >= 65536)
  for (int64_t r = 0; r < m; ++r) {
    if (simd) {
      avx512::ConvertRowBf16(x + r * ldx, k, ld, xb + r * ld);
    } else {
      for (int64_t c = 0; c < k; ++c) xb[r * ld + c] = F32ToBF16(x[r * ldx + c]);
      for (int64_t c = k; c < ld; ++c) xb[r * ld + c] = 0;
    }
  }
}

void RoundBf16(const float* x, int64_t ldx, int64_t m, int64_t k, float* xr) {
  const int64_t ld = 2 * KPairs(k);
#pragma omp parallel for schedule(static) if (m * k >= 65536)
  for (int64_t r = 0; r < m; ++r) avx512::RoundRowBf16(x + r * ldx, k, ld, xr + r * ld);
}

void GemmBf16(const Bf16Args& a) {
  if (a.m <= 0 || a.n <= 0) return;
  const bool fma = a.kernel == Bf16Kernel::kFma;
  Plan p;
  p.x = static_cast<const uint8_t*>(a.x);
  p.ldx = (a.ldx > 0 ? a.ldx : 2 * KPairs(a.k)) * (fma ? 4 : 2);
  p.groups = KPairs(a.k);
  p.packed = reinterpret_cast<const uint8_t*>(a.packed);
  p.bias = a.bias;
  p.act = a.act;
  p.sum = a.sum;
  p.m = a.m;
  p.n = a.n;
  p.out = a.out;
  p.out16 = a.out16;
  p.ldo = a.ldo;
  p.tile = fma ? &TileBf16Fma : &TileBf16;
  Drive(p);
}

void PackI8(const float* w, int64_t n, int64_t k, int8_t* packed, float* scale, int32_t* colsum) {
  const int64_t blocks = Blocks(n), kq = KQuads(k);
#pragma omp parallel for schedule(static) if (n * k >= (1 << 20))
  for (int64_t b = 0; b < blocks; ++b) {
    int8_t* dst = packed + b * kq * kBlockN * 4;
    for (int64_t j = 0; j < kBlockN; ++j) {
      const int64_t col = b * kBlockN + j;
      float amax = 0.f;
      if (col < n) {
        for (int64_t kk = 0; kk < k; ++kk) amax = std::max(amax, std::fabs(w[col * k + kk]));
      }
      const float s = amax / 127.f, inv = amax > 0.f ? 127.f / amax : 0.f;
      int32_t sum = 0;
      for (int64_t kk = 0; kk < kq * 4; ++kk) {
        int32_t q = 0;
        if (col < n && kk < k) {
          q = static_cast<int32_t>(std::nearbyint(w[col * k + kk] * inv));
          q = std::clamp(q, -127, 127);
        }
        dst[((kk / 4) * kBlockN + j) * 4 + kk % 4] = static_cast<int8_t>(q);
        sum += q;
      }
      scale[col] = s;  // padded columns: 0
      colsum[col] = sum;
    }
  }
}

namespace {
float Widen(float v) { return v; }
float Widen(uint16_t v) { return BF16ToF32(v); }

// One row of QuantizeI8: d [ld bytes] gets q + 128 (padding 128); returns the row's scale.
template <typename E>
float QuantizeRow(const E* xr, int64_t k, int64_t ld, uint8_t* d, bool simd) {
  if (simd) return avx512::QuantizeRowI8(xr, k, ld, d) / 127.f;  // the same bits
  float amax = 0.f;
  for (int64_t c = 0; c < k; ++c) amax = std::max(amax, std::fabs(Widen(xr[c])));
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  for (int64_t c = 0; c < k; ++c) {
    const int32_t q =
        std::clamp(static_cast<int32_t>(std::nearbyint(Widen(xr[c]) * inv)), -127, 127);
    d[c] = static_cast<uint8_t>(q + 128);
  }
  for (int64_t c = k; c < ld; ++c) d[c] = 128;
  return amax / 127.f;
}

template <typename E>
void Quantize(const E* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq, float* scale) {
  const int64_t ld = 4 * KQuads(k);
  const bool simd = Features().avx512;
#pragma omp parallel for schedule(static) if (m * k >= 65536)
  for (int64_t r = 0; r < m; ++r) scale[r] = QuantizeRow(x + r * ldx, k, ld, xq + r * ld, simd);
}

// QuantizeI8's rows, each scattered into its 64-byte pieces of the A tiles.
template <typename E>
void QuantizeTiles(const E* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq, float* scale) {
  const int64_t ld = 4 * KQuads(k);
  const int64_t steps = KQuads(k) / 16;
  const int64_t rows = (m + 15) / 16 * 16;
  const bool simd = Features().avx512;
#pragma omp parallel if (m * k >= 65536)
  {
    static thread_local std::vector<uint8_t> row;  // one row of QuantizeI8's bytes
    row.resize(static_cast<size_t>(ld));
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (r < m) {
        scale[r] = QuantizeRow(x + r * ldx, k, ld, row.data(), simd);
      } else {
        std::memset(row.data(), 128, static_cast<size_t>(ld));
      }
      uint8_t* d = xq + (r / 16) * steps * 1024 + (r % 16) * 64;
      for (int64_t s = 0; s < steps; ++s) std::memcpy(d + s * 1024, row.data() + s * 64, 64);
    }
  }
}
}  // namespace

void QuantizeI8(const float* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq, float* scale) {
  Quantize(x, ldx, m, k, xq, scale);
}
void QuantizeI8(const uint16_t* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq, float* scale) {
  Quantize(x, ldx, m, k, xq, scale);
}
void QuantizeI8Tiles(const float* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq, float* scale) {
  QuantizeTiles(x, ldx, m, k, xq, scale);
}
void QuantizeI8Tiles(const uint16_t* x, int64_t ldx, int64_t m, int64_t k, uint8_t* xq,
                     float* scale) {
  QuantizeTiles(x, ldx, m, k, xq, scale);
}

void GemmI8(const I8Args& a) {
  if (a.m <= 0 || a.n <= 0) return;
  if (a.x_tiles) {
    std::fprintf(stderr, "sluice: GemmI8 called with activations in the AMX tile layout\n");
    std::abort();
  }
  Plan p;
  p.x = a.x;
  p.ldx = KQuads(a.k) * 4;
  p.groups = KQuads(a.k);
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
  p.tile = Features().avx512_vnni ? &TileVnni : &TileI8Portable;
  Drive(p);
}

const char* I8KernelName() { return Features().avx512_vnni ? "avx512_vnni" : "portable"; }

}  // namespace sluice::cpu::x86
