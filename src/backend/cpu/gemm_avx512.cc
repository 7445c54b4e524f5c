// AVX-512 micro-kernels of gemm_x86.h (vdpbf16ps, vpdpbusd). Everything in this file is
// compiled for AVX512-BF16/VNNI through a target pragma and must only be called after a
// run-time check of Features() (gemm_x86.cc does); no inline function of a shared header
// is instantiated inside the pragma region.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "backend/cpu/gemm_x86_inl.h"

// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves (`__Y = __Y`),
// which -Wmaybe-uninitialized reports once inlined; the values are never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,fma")

namespace sluice::cpu::x86::avx512 {
namespace {

inline int32_t Load32(const uint8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

// MR rows x 64 columns; acc_out is [MR, 64] f32.
template <int MR>
void TileBf16(const uint8_t* x, int64_t ldx, int64_t kp, const uint8_t* w, float* acc_out) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kp; ++p) {
    const uint8_t* wp = w + p * 256;
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(wp);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(wp + 64);
    const __m512bh w2 = (__m512bh)_mm512_loadu_si512(wp + 128);
    const __m512bh w3 = (__m512bh)_mm512_loadu_si512(wp + 192);
    for (int r = 0; r < MR; ++r) {
      const __m512bh a = (__m512bh)_mm512_set1_epi32(Load32(x + r * ldx + p * 4));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], a, w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], a, w1);
      acc[r][2] = _mm512_dpbf16_ps(acc[r][2], a, w2);
      acc[r][3] = _mm512_dpbf16_ps(acc[r][3], a, w3);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < 4; ++v) _mm512_storeu_ps(acc_out + r * 64 + v * 16, acc[r][v]);
  }
}

template <int MR>
void TileVnni(const uint8_t* x, int64_t ldx, int64_t kq, const uint8_t* w, const int32_t* colsum,
              float* acc_out) {
  __m512i acc[MR][4];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_si512();
  }
  for (int64_t q = 0; q < kq; ++q) {
    const uint8_t* wp = w + q * 256;
    const __m512i w0 = _mm512_loadu_si512(wp);
    const __m512i w1 = _mm512_loadu_si512(wp + 64);
    const __m512i w2 = _mm512_loadu_si512(wp + 128);
    const __m512i w3 = _mm512_loadu_si512(wp + 192);
    for (int r = 0; r < MR; ++r) {
      const __m512i a = _mm512_set1_epi32(Load32(x + r * ldx + q * 4));
      acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, w0);
      acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, w1);
      acc[r][2] = _mm512_dpbusd_epi32(acc[r][2], a, w2);
      acc[r][3] = _mm512_dpbusd_epi32(acc[r][3], a, w3);
    }
  }
  for (int v = 0; v < 4; ++v) {
    const __m512i comp = _mm512_slli_epi32(_mm512_loadu_si512(colsum + v * 16), 7);  // 128 * sum
    for (int r = 0; r < MR; ++r) {
      _mm512_storeu_ps(acc_out + r * 64 + v * 16,
                       _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[r][v], comp)));
    }
  }
}

}  // namespace

void TileBf16Any(const uint8_t* x, int64_t ldx, int64_t kp, const uint8_t* w, int rows,
                 float* acc) {
  switch (rows) {
    case 1:
      return TileBf16<1>(x, ldx, kp, w, acc);
    case 2:
      return TileBf16<2>(x, ldx, kp, w, acc);
    case 3:
      return TileBf16<3>(x, ldx, kp, w, acc);
    case 4:
      return TileBf16<4>(x, ldx, kp, w, acc);
    case 5:
      return TileBf16<5>(x, ldx, kp, w, acc);
    default:
      return TileBf16<6>(x, ldx, kp, w, acc);
  }
}

void TileVnniAny(const uint8_t* x, int64_t ldx, int64_t kq, const uint8_t* w, int rows,
                 const int32_t* colsum, float* acc) {
  switch (rows) {
    case 1:
      return TileVnni<1>(x, ldx, kq, w, colsum, acc);
    case 2:
      return TileVnni<2>(x, ldx, kq, w, colsum, acc);
    case 3:
      return TileVnni<3>(x, ldx, kq, w, colsum, acc);
    case 4:
      return TileVnni<4>(x, ldx, kq, w, colsum, acc);
    case 5:
      return TileVnni<5>(x, ldx, kq, w, colsum, acc);
    default:
      return TileVnni<6>(x, ldx, kq, w, colsum, acc);
  }
}

// One row: f32 -> bf16 (RNE), odd k padded with a zero.
void ConvertRowBf16(const float* x, int64_t k, uint16_t* xb) {
  int64_t c = 0;
  for (; c + 16 <= k; c += 16) {
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + c));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(xb + c), (__m256i)b);
  }
  if (c < k) {
    const __mmask16 mask = static_cast<__mmask16>((1u << (k - c)) - 1);
    const __m256bh b = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x + c));
    _mm256_mask_storeu_epi16(xb + c, mask, (__m256i)b);
  }
  if (k & 1) xb[k] = 0;
}

}  // namespace sluice::cpu::x86::avx512

#pragma GCC pop_options
#pragma GCC diagnostic pop
