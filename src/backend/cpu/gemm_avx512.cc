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

// Few-row tiles stream weights from memory (decode): prefetch kPrefetchBytes ahead.
// (Reading a little past the weights' end is harmless: prefetches do not fault.)
constexpr int kPrefetchRows = 4;
constexpr int64_t kPrefetchBytes = 4096;

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
    if constexpr (MR <= kPrefetchRows) {
      for (int v = 0; v < 4; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchBytes + 64 * v), _MM_HINT_T0);
    }
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

// The same packed bf16 weights, widened in registers to f32 (even k: lane << 16, odd k:
// lane & 0xffff0000) and multiplied with f32 FMA by activations already rounded to bf16
// (x: f32 rows): products exact, one f32 rounding per k, k in order. On CPUs where
// vdpbf16ps issues at half the rate of f32 FMA (Sapphire/Emerald Rapids without AMX use)
// this runs at up to 6/7 of the f32 FMA peak. Needs only AVX-512F.
template <int MR>
void TileBf16Fma(const uint8_t* x, int64_t ldx, int64_t kp, const uint8_t* w, float* acc_out) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_setzero_ps();
  }
  const __m512i hi = _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u));
  for (int64_t p = 0; p < kp; ++p) {
    const uint8_t* wp = w + p * 256;
    if constexpr (MR <= kPrefetchRows) {
      for (int v = 0; v < 4; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchBytes + 64 * v), _MM_HINT_T0);
    }
    __m512 wf[4];
    for (int v = 0; v < 4; ++v) {
      wf[v] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_loadu_si512(wp + 64 * v), 16));
    }
    for (int r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(*reinterpret_cast<const float*>(x + r * ldx + p * 8));
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(a, wf[v], acc[r][v]);
    }
    for (int v = 0; v < 4; ++v) {
      wf[v] = _mm512_castsi512_ps(_mm512_and_si512(_mm512_loadu_si512(wp + 64 * v), hi));
    }
    for (int r = 0; r < MR; ++r) {
      const __m512 a = _mm512_set1_ps(*reinterpret_cast<const float*>(x + r * ldx + p * 8 + 4));
      for (int v = 0; v < 4; ++v) acc[r][v] = _mm512_fmadd_ps(a, wf[v], acc[r][v]);
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
    if constexpr (MR <= kPrefetchRows) {
      for (int v = 0; v < 4; ++v)
        _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchBytes + 64 * v), _MM_HINT_T0);
    }
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

void TileBf16FmaAny(const uint8_t* x, int64_t ldx, int64_t kp, const uint8_t* w, int rows,
                    float* acc) {
  switch (rows) {
    case 1:
      return TileBf16Fma<1>(x, ldx, kp, w, acc);
    case 2:
      return TileBf16Fma<2>(x, ldx, kp, w, acc);
    case 3:
      return TileBf16Fma<3>(x, ldx, kp, w, acc);
    case 4:
      return TileBf16Fma<4>(x, ldx, kp, w, acc);
    case 5:
      return TileBf16Fma<5>(x, ldx, kp, w, acc);
    default:
      return TileBf16Fma<6>(x, ldx, kp, w, acc);
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

// One row: f32 -> bf16 (RNE), zero padded to ld.
void ConvertRowBf16(const float* x, int64_t k, int64_t ld, uint16_t* xb) {
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
  for (int64_t i = k; i < ld; ++i) xb[i] = 0;
}

// One row: f32 -> f32 rounded to bf16 (RNE; NaN stays NaN), zero padded to ld. AVX-512F.
void RoundRowBf16(const float* x, int64_t k, int64_t ld, float* xr) {
  const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
  const __m512i hi = _mm512_set1_epi32(static_cast<int32_t>(0xffff0000u));
  const __m512i quiet = _mm512_set1_epi32(0x00400000);
  for (int64_t c = 0; c < k; c += 16) {
    const __mmask16 mask =
        k - c >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (k - c)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(mask, x + c);
    const __m512i b = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(b, 16), one);
    __m512i r = _mm512_and_si512(_mm512_add_epi32(b, _mm512_add_epi32(bias, lsb)), hi);
    const __mmask16 nan = _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
    r = _mm512_mask_mov_epi32(r, nan, _mm512_and_si512(_mm512_or_si512(b, quiet), hi));
    _mm512_mask_storeu_ps(xr + c, mask, _mm512_castsi512_ps(r));
  }
  for (int64_t i = k; i < ld; ++i) xr[i] = 0.f;
}

// One row: per-token symmetric int8 as gemm_x86.cc QuantizeI8's scalar loop computes it, bit
// for bit: amax = max |x| (NaN ignored, as std::max(amax, NaN) keeps amax), q = clamp(
// nearbyint(x * (127 / amax)), -127, 127) + 128 (round half to even, as nearbyint in the
// default mode; NaN -> INT_MIN -> -127 on both), zero (128) padded to ld. AVX-512F.
namespace {
inline __m512 LoadF32(const float* x, __mmask16 mask) { return _mm512_maskz_loadu_ps(mask, x); }
inline __m512 LoadF32(const uint16_t* x, __mmask16 mask) {  // bf16, widened exactly
  const __m512i w = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(mask, x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}

template <typename E>
float QuantizeRow(const E* x, int64_t k, int64_t ld, uint8_t* d) {
  __m512 vmax = _mm512_setzero_ps();
  for (int64_t c = 0; c < k; c += 16) {
    const __mmask16 mask =
        k - c >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (k - c)) - 1);
    // max(|x|, vmax): the second operand when either is NaN, so a NaN lane keeps vmax.
    vmax = _mm512_max_ps(_mm512_abs_ps(LoadF32(x + c, mask)), vmax);
  }
  const float amax = _mm512_reduce_max_ps(vmax);
  const float inv = amax > 0.f ? 127.f / amax : 0.f;
  const __m512 vinv = _mm512_set1_ps(inv);
  const __m512i lo = _mm512_set1_epi32(-127), hi = _mm512_set1_epi32(127);
  const __m512i off = _mm512_set1_epi32(128);
  for (int64_t c = 0; c < k; c += 16) {
    const __mmask16 mask =
        k - c >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << (k - c)) - 1);
    __m512 y = _mm512_mul_ps(LoadF32(x + c, mask), vinv);
    y = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512i q = _mm512_cvtps_epi32(y);  // integral already; NaN -> INT_MIN
    q = _mm512_add_epi32(_mm512_max_epi32(_mm512_min_epi32(q, hi), lo), off);
    _mm512_mask_cvtepi32_storeu_epi8(d + c, mask, q);
  }
  for (int64_t i = k; i < ld; ++i) d[i] = 128;
  return amax;
}
}  // namespace

float QuantizeRowI8(const float* x, int64_t k, int64_t ld, uint8_t* d) {
  return QuantizeRow(x, k, ld, d);
}
float QuantizeRowI8(const uint16_t* x, int64_t k, int64_t ld, uint8_t* d) {
  return QuantizeRow(x, k, ld, d);
}

}  // namespace sluice::cpu::x86::avx512

#pragma GCC pop_options
#pragma GCC diagnostic pop
