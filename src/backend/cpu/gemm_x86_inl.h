// Internal to gemm_x86.cc / gemm_avx512.cc: the AVX-512 micro-kernels' entry points.
// rows <= kRows; acc is [rows, 64] f32. Call only when Features() reports the ISA.
#pragma once

#include <cstdint>

namespace sluice::cpu::x86 {
constexpr int kRows = 6;  // rows per micro-tile: 6 x 4 accumulators + 4 weights + 1 of 32 zmm
namespace avx512 {
void TileBf16Any(const uint8_t* x, int64_t ldx, int64_t kp, const uint8_t* w, int rows, float* acc);
void TileVnniAny(const uint8_t* x, int64_t ldx, int64_t kq, const uint8_t* w, int rows,
                 const int32_t* colsum, float* acc);
void TileBf16FmaAny(const uint8_t* x, int64_t ldx, int64_t kp, const uint8_t* w, int rows,
                    float* acc);
void RoundRowBf16(const float* x, int64_t k, int64_t ld, float* xr);
void ConvertRowBf16(const float* x, int64_t k, int64_t ld, uint16_t* xb);
// Returns the row's max |x|; d gets the quantised row (QuantizeI8's bits).
float QuantizeRowI8(const float* x, int64_t k, int64_t ld, uint8_t* d);
float QuantizeRowI8(const uint16_t* x, int64_t k, int64_t ld, uint8_t* d);  // bf16 rows
}  // namespace avx512
}  // namespace sluice::cpu::x86
