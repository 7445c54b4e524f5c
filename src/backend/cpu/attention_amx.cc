// Attention with bf16 products on AMX tiles (AttentionParams::products == kBF16 on f32
// activations, or bf16 activations): Q K^T and P V run on tdpbf16ps; scores, softmax and row
// sums stay f32, outputs are f32 or rounded once to bf16 with bf16 activations (transformers'
// bf16 autocast rounds q, k, v and the probabilities to bf16 as well).
// Same tasks and masks as the f32 kernel (attention.cc); a task is one (sequence, head) or a
// 64-row part of one.
//
// Per task: K and V of the task's key range are packed once into bf16 B tiles (keys in
// blocks of 16, head columns in pairs); per sub-block of 64 query rows the rows go to bf16
// (A tiles, 32 head columns each); per group of 16 rows, scores = Q K^T for the key blocks of
// the group's range (4 accumulator tiles = 64 keys at a time), the softmax per row over its
// own range in f32 (max subtracted; an exp accurate to 5e-5, far below bf16's rounding), the
// probabilities written as bf16 in the same pass (zeros outside the row's range), P V over the
// group's range in chunks of 32 keys (4 accumulator tiles = 64 output columns at a time).
//
// Batch invariance: a tile row's result depends only on that row of A (the hardware tests
// check it, as for the GEMM). A score is one tile element over the head's columns in fixed
// chunks; an output one element over key chunks that start on multiples of 32 logical key
// positions (the task's first key is rounded down to one): neither the task split, nor the
// batch, nor the thread count changes the chunks a row goes through, and the probabilities
// outside a row's own range are exact zeros over zero-padded V rows.
//
// Written once over a tile-operations policy: HwTiles (the instructions; only where
// amx::Available()) and EmuTiles (the same operations in portable C++ after the ISA's
// pseudo-code), so that the driver runs and is tested on machines without AMX. Everything
// else here (conversions, softmax, packing) uses AVX512-BF16 instructions.
//
// Compiled for AVX512-BF16 and AMX through a target pragma; called only after a run-time
// check (attention.cc). attention_inl.h's inline functions are defined before the pragma,
// so they are not compiled for it.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/cpu/amx.h"
#include "backend/cpu/amx_emu_inl.h"
#include "backend/cpu/attention_inl.h"

// GCC 12's AVX-512 headers initialise "undefined" vectors from themselves (`__Y = __Y`),
// which -Wmaybe-uninitialized reports once inlined; the values are never read.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC push_options
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma,amx-tile,amx-bf16")

namespace sluice::cpu::amx_attention {
namespace {

constexpr int kRows = 16;      // query rows per group (one A tile)
constexpr int kKeyBlock = 16;  // keys per packed K block (one tile of scores' columns)
static_assert(kSubBlock % kRows == 0, "groups must not straddle sub-blocks");

inline __mmask16 FirstN(int64_t k) {
  return static_cast<__mmask16>(k >= 16 ? 0xFFFFu : (1u << k) - 1u);
}

// dst[0..n) = bf16(src[0..n)), round to nearest even.
void ToBf16(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + i + 16), _mm512_loadu_ps(src + i));
    _mm512_storeu_si512(dst + i, reinterpret_cast<__m512i>(v));
  }
  for (; i < n; i += 16) {
    const __mmask16 m = FirstN(n - i);
    const __m256bh v = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + i));
    _mm256_mask_storeu_epi16(dst + i, m, reinterpret_cast<__m256i>(v));
  }
}

// bf16 activations (AttentionParams on bf16 q/k/v) are copied as they are.
void ToBf16(const uint16_t* src, uint16_t* dst, int64_t n) {
  std::memcpy(dst, src, n * sizeof(uint16_t));
}

// Columns c .. c + 15 (mask m) of rows a and b (null: zeros) as 32 bf16 lanes: a's in lanes
// 0..15, b's in 16..31.
__m512i LoadPair16(const float* a, const float* b, int c, __mmask16 m) {
  const __m512 va = a != nullptr ? _mm512_maskz_loadu_ps(m, a + c) : _mm512_setzero_ps();
  const __m512 vb = b != nullptr ? _mm512_maskz_loadu_ps(m, b + c) : _mm512_setzero_ps();
  return reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(vb, va));
}
__m512i LoadPair16(const uint16_t* a, const uint16_t* b, int c, __mmask16 m) {
  const __m256i va = a != nullptr ? _mm256_maskz_loadu_epi16(m, a + c) : _mm256_setzero_si256();
  const __m256i vb = b != nullptr ? _mm256_maskz_loadu_epi16(m, b + c) : _mm256_setzero_si256();
  return _mm512_inserti64x4(_mm512_castsi256_si512(va), vb, 1);
}

// Output columns (mask m) as f32, or rounded to bf16 (nearest even) for bf16 activations.
void StoreOut(float* o, __mmask16 m, __m512 x) { _mm512_mask_storeu_ps(o, m, x); }
void StoreOut(uint16_t* o, __mmask16 m, __m512 x) {
  _mm256_mask_storeu_epi16(o, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x)));
}

// exp(x) for x <= 0 (softmax arguments after the max is subtracted) to well within bf16's
// precision: n = round(x / ln 2), r = x - n ln 2, degree-4 Taylor polynomial (relative error
// < 5e-5, against bf16's 2^-8 rounding), times 2^n (vscalefps). Arguments below -87 give
// ~1e-38 (their bf16 is zero or a denormal, which the tiles read as zero).
inline __m512 ExpBf16(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-87.f));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.442695040888963407359924681f)),
                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693147180559945309417232121f), x);
  __m512 q = _mm512_fmadd_ps(r, _mm512_set1_ps(1.f / 24), _mm512_set1_ps(1.f / 6));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(0.5f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.f));
  q = _mm512_fmadd_ps(q, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(q, n);
}

// One row's probabilities: raw scores s[a..b] (Q K^T, unscaled) -> p[a..b] = bf16(exp(scale *
// s - max)), max over the row's scaled scores; p[plo..a) and p(b..pend) = 0. Returns the sum
// of the f32 exps (fixed order for a given range).
float SoftmaxToBf16(const float* s, int64_t a, int64_t b, float scale, int64_t plo, int64_t pend,
                    uint16_t* p) {
  const int64_t n = b - a + 1;
  const float* x = s + a;
  __m512 vm = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) vm = _mm512_max_ps(vm, _mm512_loadu_ps(x + j));
  if (j < n) {
    const __mmask16 m = FirstN(n - j);
    vm = _mm512_mask_max_ps(vm, m, vm, _mm512_maskz_loadu_ps(m, x + j));
  }
  // scale > 0: the max of the scaled scores is the scaled max.
  const __m512 vmx = _mm512_set1_ps(_mm512_reduce_max_ps(vm) * scale);
  const __m512 vs = _mm512_set1_ps(scale);
  std::memset(p + plo, 0, (a - plo) * sizeof(uint16_t));
  std::memset(p + b + 1, 0, (pend - b - 1) * sizeof(uint16_t));
  uint16_t* out = p + a;
  __m512 sum = _mm512_setzero_ps();
  for (j = 0; j + 32 <= n; j += 32) {
    const __m512 e0 = ExpBf16(_mm512_fmsub_ps(_mm512_loadu_ps(x + j), vs, vmx));
    const __m512 e1 = ExpBf16(_mm512_fmsub_ps(_mm512_loadu_ps(x + j + 16), vs, vmx));
    sum = _mm512_add_ps(sum, e0);
    sum = _mm512_add_ps(sum, e1);
    _mm512_storeu_si512(out + j, reinterpret_cast<__m512i>(_mm512_cvtne2ps_pbh(e1, e0)));
  }
  for (; j < n; j += 16) {
    const __mmask16 m = FirstN(n - j);
    const __m512 e =
        _mm512_maskz_mov_ps(m, ExpBf16(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(m, x + j), vs, vmx)));
    sum = _mm512_add_ps(sum, e);
    _mm256_mask_storeu_epi16(out + j, m, reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(e)));
  }
  return _mm512_reduce_add_ps(sum);
}

// Packs keys [lo, lo + nk) (zero rows past nk, zero columns past d) into blocks of 16 keys:
// kp[(block * dp / 2 + pair) * 32 + 2 * key + half] = bf16(K[lo + block * 16 + key][2 * pair
// + half]). 16 pairs of a block (32 head columns) are one B tile of Q K^T (16 rows of 64
// bytes: pairs x keys).
template <typename E>
void PackKeys(const E* kb, int64_t ldk, const SeqKeys& sk, int lo, int64_t nk, int d, int dp,
              uint16_t* kp) {
  const int np = dp / 2;
  alignas(64) uint16_t rows[kKeyBlock * kMaxHeadDim];
  const __m512i index =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32(np));
  const int64_t nb = (nk + kKeyBlock - 1) / kKeyBlock;
  for (int64_t b = 0; b < nb; ++b) {
    for (int jj = 0; jj < kKeyBlock; ++jj) {
      uint16_t* row = rows + jj * dp;
      const int64_t j = b * kKeyBlock + jj;
      if (j < nk) {
        ToBf16(kb + sk.Row(static_cast<int>(lo + j)) * ldk, row, d);
        std::memset(row + d, 0, (dp - d) * sizeof(uint16_t));
      } else {
        std::memset(row, 0, dp * sizeof(uint16_t));
      }
    }
    // Column pair c of the 16 rows: a 32-bit gather with stride np pairs.
    for (int c = 0; c < np; ++c) {
      const __m512i v = _mm512_i32gather_epi32(index, rows + 2 * c, 4);
      _mm512_storeu_si512(kp + (b * np + c) * 32, v);
    }
  }
}

// Packs values of keys [lo, lo + 2 * npairs) (zero rows past nk, zero columns past d) in
// pairs: vp[(pair * dp / 16 + block) * 32 + 2 * column + half] = bf16(V[lo + 2 * pair + half]
// [block * 16 + column]). 16 pairs of one column block (row stride dp * 4 bytes) are one B
// tile of P V (pairs x columns).
template <typename E>
void PackValues(const E* vb, int64_t ldv, const SeqKeys& sk, int lo, int64_t nk, int d, int dp,
                int64_t npairs, uint16_t* vp) {
  const int ncb = dp / 16;
  // Interleaves two rows' 16 bf16 columns: lanes 0..15 row a, 16..31 row b.
  const __m512i mix = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                       23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
  for (int64_t jp = 0; jp < npairs; ++jp) {
    const E* ra = 2 * jp < nk ? vb + sk.Row(static_cast<int>(lo + 2 * jp)) * ldv : nullptr;
    const E* rb = 2 * jp + 1 < nk ? vb + sk.Row(static_cast<int>(lo + 2 * jp + 1)) * ldv : nullptr;
    for (int cb = 0; cb < ncb; ++cb) {
      const int c = cb * 16;
      const __mmask16 m = c < d ? FirstN(d - c) : 0;
      const __m512i both = LoadPair16(ra, rb, c, m);
      _mm512_storeu_si512(vp + (jp * ncb + cb) * 32, _mm512_permutexvar_epi16(mix, both));
    }
  }
}

// Tiles (amx::ConfigureSquareTiles: each 16 rows x 64 bytes): 0..3 accumulators, 4 the A
// operand (16 query rows x 32 head columns, or 16 rows x 32 keys of probabilities), 5..7 B
// operands; B for accumulator j is tile 5, 6, 7, 5.
// The tile macros of GCC's headers stringify the tile number: literals only, hence the
// `if constexpr` ladders.
struct HwTiles {
  static void Begin() { amx::ConfigureSquareTiles(); }
  static void End() { _tile_release(); }
  template <int J>
  static void Zero() {
    if constexpr (J == 0) {
      _tile_zero(0);
    } else if constexpr (J == 1) {
      _tile_zero(1);
    } else if constexpr (J == 2) {
      _tile_zero(2);
    } else {
      _tile_zero(3);
    }
  }
  // GCC's tileloadd asm names no memory operand: the barriers keep the stores that wrote the
  // operand (packing, the probabilities) before the load.
  static void LoadA(const void* p, int64_t stride) {
    __asm__ volatile("" ::: "memory");
    _tile_loadd(4, p, stride);
  }
  template <int J>
  static void LoadB(const void* p, int64_t stride) {
    __asm__ volatile("" ::: "memory");
    if constexpr (J == 0 || J == 3) {
      _tile_loadd(5, p, stride);
    } else if constexpr (J == 1) {
      _tile_loadd(6, p, stride);
    } else {
      _tile_loadd(7, p, stride);
    }
  }
  template <int J>
  static void Dot() {
    if constexpr (J == 0) {
      _tile_dpbf16ps(0, 4, 5);
    } else if constexpr (J == 1) {
      _tile_dpbf16ps(1, 4, 6);
    } else if constexpr (J == 2) {
      _tile_dpbf16ps(2, 4, 7);
    } else {
      _tile_dpbf16ps(3, 4, 5);
    }
  }
  // The barrier orders the loads of the stored accumulators after the store.
  template <int J>
  static void Store(void* p, int64_t stride) {
    if constexpr (J == 0) {
      _tile_stored(0, p, stride);
    } else if constexpr (J == 1) {
      _tile_stored(1, p, stride);
    } else if constexpr (J == 2) {
      _tile_stored(2, p, stride);
    } else {
      _tile_stored(3, p, stride);
    }
    __asm__ volatile("" ::: "memory");
  }
};

struct EmuTiles {
  struct State {
    alignas(64) uint8_t t[8][16 * 64];
  };
  static State& S() {
    static thread_local State s;
    return s;
  }
  static void Begin() { std::memset(&S(), 0, sizeof(State)); }  // ldtilecfg zeroes tiles
  static void End() {}
  static void Load(int tile, const void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) {
      std::memcpy(S().t[tile] + r * 64, static_cast<const uint8_t*>(p) + r * stride, 64);
    }
  }
  template <int J>
  static void Zero() {
    std::memset(S().t[J], 0, 16 * 64);
  }
  static void LoadA(const void* p, int64_t stride) { Load(4, p, stride); }
  template <int J>
  static void LoadB(const void* p, int64_t stride) {
    Load(J == 3 ? 5 : 5 + J, p, stride);
  }
  template <int J>
  static void Store(void* p, int64_t stride) {
    for (int r = 0; r < 16; ++r) {
      std::memcpy(static_cast<uint8_t*>(p) + r * stride, S().t[J] + r * 64, 64);
    }
  }
  // TDPBF16PS after its pseudo-code (amx_emu_inl.h).
  template <int J>
  static void Dot() {
    amx::EmuDotBf16(S().t[4], S().t[J == 3 ? 5 : 5 + J], S().t[J]);
  }
};

// Accumulators 0 .. n - 1 (n <= 4).
template <class T>
void ZeroAcc(int n) {
  T::template Zero<0>();
  if (n > 1) T::template Zero<1>();
  if (n > 2) T::template Zero<2>();
  if (n > 3) T::template Zero<3>();
}
// Accumulator j += A x (B_j at b(j), row stride ldb) for j < n.
template <class T, class BAt>
void DotAcc(int n, BAt b, int64_t ldb) {
  T::template LoadB<0>(b(0), ldb);
  T::template Dot<0>();
  if (n > 1) {
    T::template LoadB<1>(b(1), ldb);
    T::template Dot<1>();
  }
  if (n > 2) {
    T::template LoadB<2>(b(2), ldb);
    T::template Dot<2>();
  }
  if (n > 3) {
    T::template LoadB<3>(b(3), ldb);
    T::template Dot<3>();
  }
}
// Accumulator j to c + 16 j floats (row stride ldc bytes) for j < n.
template <class T>
void StoreAcc(int n, float* c, int64_t ldc) {
  T::template Store<0>(c, ldc);
  if (n > 1) T::template Store<1>(c + 16, ldc);
  if (n > 2) T::template Store<2>(c + 32, ldc);
  if (n > 3) T::template Store<3>(c + 48, ldc);
}

// E: the activations' element type (float, or uint16_t for bf16 q/k/v/out).
template <class T, typename E>
void RunTask(const AttentionParams& p, const AttnTask& task, const Bf16AttnScratch& ws) {
  const int d = p.head_dim, dp = Bf16PaddedDim(d), np = dp / 2, ncb = dp / 16;
  const SeqKeys sk = KeysOf(p, task.seq);
  const int base = sk.base, pre = sk.pre, klen = sk.klen;
  const int kvh = task.head / (p.num_heads / p.num_kv_heads);
  const int64_t ldq = p.q.row_stride(), ldk = p.k.row_stride(), ldv = p.v.row_stride();
  const int64_t ldo = p.out.row_stride();
  const E* qf = p.q.ptr<E>() + base * ldq + static_cast<int64_t>(task.head) * d;
  const E* kf = p.k.ptr<E>() + static_cast<int64_t>(kvh) * d;
  const E* vf = p.v.ptr<E>() + static_cast<int64_t>(kvh) * d;
  E* of = p.out.ptr<E>() + base * ldo + static_cast<int64_t>(task.head) * d;
  const AttnTask t = TrimRowsWithoutKeys(p, sk, task, of, ldo);
  if (t.q1 == t.q0) return;

  int lo, hi, lo_last, hi_last;
  KeyRange(p, pre + t.q0, klen, &lo, &hi);
  KeyRange(p, pre + t.q1 - 1, klen, &lo_last, &hi_last);
  lo &= ~31;  // key chunks start on multiples of 32 logical positions (file comment)
  const int64_t nk = hi_last - lo + 1;
  const int64_t ldp = (nk + 31) / 32 * 32;  // S and P row stride (<= Bf16PaddedKeys)
  PackKeys(kf, ldk, sk, lo, nk, d, dp, ws.kp);
  PackValues(vf, ldv, sk, lo, nk, d, dp, ldp / 2, ws.vp);
  alignas(64) float acc[16 * 64];
  T::Begin();
  for (int sb = t.q0; sb < t.q1; sb += kSubBlock) {
    const int se = std::min(t.q1, sb + kSubBlock);
    const int nq = se - sb;
    for (int i = sb; i < se; ++i) {
      uint16_t* qr = ws.qb + (i - sb) * dp;
      ToBf16(qf + i * ldq, qr, d);
      std::memset(qr + d, 0, (dp - d) * sizeof(uint16_t));
    }
    for (int g = 0; g < nq; g += kRows) {
      const int nrows = std::min(kRows, nq - g);
      // The group's key range [glo, ghi] (offsets from lo).
      int a0, b0, a1, b1;
      KeyRange(p, pre + sb + g, klen, &a0, &b0);
      KeyRange(p, pre + sb + g + nrows - 1, klen, &a1, &b1);
      const int64_t glo = a0 - lo, ghi = b1 - lo;
      // Q K^T, 4 key blocks at a time. Rows past nrows are stale bf16 rows of the scratch:
      // they only fill tile rows whose results are never read.
      const uint16_t* qa = ws.qb + g * dp;
      float* sg = ws.s + g * ldp;
      for (int64_t jb = glo / kKeyBlock; jb <= ghi / kKeyBlock; jb += 4) {
        const int n = static_cast<int>(std::min<int64_t>(4, ghi / kKeyBlock - jb + 1));
        ZeroAcc<T>(n);
        for (int kc = 0; kc < dp / 32; ++kc) {
          T::LoadA(qa + kc * 32, dp * 2);
          DotAcc<T>(
              n, [&](int j) { return ws.kp + ((jb + j) * np + kc * 16) * 32; }, 64);
        }
        StoreAcc<T>(n, sg + jb * kKeyBlock, ldp * 4);
      }
      // Softmax per row over its own range; bf16 probabilities over the group's range
      // widened to whole 32-key chunks, zero outside the row's range.
      const int64_t plo = glo & ~int64_t{31}, pend = (ghi + 32) & ~int64_t{31};
      float inv[kRows];
      for (int r = 0; r < nrows; ++r) {
        int rlo, rhi;
        KeyRange(p, pre + sb + g + r, klen, &rlo, &rhi);
        inv[r] = 1.f / SoftmaxToBf16(sg + r * ldp, rlo - lo, rhi - lo, p.scale, plo, pend,
                                     ws.pb + (g + r) * ldp);
      }
      // P V, 64 output columns (4 accumulators) at a time, 32 keys per step.
      for (int cq = 0; cq < ncb; cq += 4) {
        const int n = std::min(4, ncb - cq);
        ZeroAcc<T>(n);
        for (int64_t c0 = plo; c0 < pend; c0 += 32) {
          T::LoadA(ws.pb + g * ldp + c0, ldp * 2);
          DotAcc<T>(
              n, [&](int j) { return ws.vp + ((c0 / 2) * ncb + cq + j) * 32; }, ncb * 64);
        }
        StoreAcc<T>(n, acc, 64 * 4);
        const int c_end = std::min(d, (cq + n) * 16);
        for (int r = 0; r < nrows; ++r) {
          const __m512 vi = _mm512_set1_ps(inv[r]);
          E* o = of + static_cast<int64_t>(sb + g + r) * ldo;
          for (int c = cq * 16; c < c_end; c += 16) {
            const __m512 x = _mm512_loadu_ps(acc + r * 64 + (c - cq * 16));
            StoreOut(o + c, FirstN(c_end - c), _mm512_mul_ps(x, vi));
          }
        }
      }
    }
  }
  T::End();
}

}  // namespace

void RunTaskHw(const AttentionParams& p, const AttnTask& task, const Bf16AttnScratch& ws) {
  if (p.q.dtype == DType::kBF16) {
    RunTask<HwTiles, uint16_t>(p, task, ws);
  } else {
    RunTask<HwTiles, float>(p, task, ws);
  }
}
void RunTaskEmu(const AttentionParams& p, const AttnTask& task, const Bf16AttnScratch& ws) {
  if (p.q.dtype == DType::kBF16) {
    RunTask<EmuTiles, uint16_t>(p, task, ws);
  } else {
    RunTask<EmuTiles, float>(p, task, ws);
  }
}

}  // namespace sluice::cpu::amx_attention

#pragma GCC pop_options
#pragma GCC diagnostic pop
