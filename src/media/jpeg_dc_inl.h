// Internal to jpeg_dc.cc (its only includer): the tables fixed by the JPEG format and by
// libjpeg-turbo's arithmetic (zigzag order, range limit, the 1x1 and 2x2 reduced IDCTs, the
// YCbCr -> RGB tables), and the Huffman decoding (tables with multi-symbol skips, the bit
// reader). Everything is in an anonymous namespace, as in gemm_amx_inl.h: the includer gets
// its own copies and the hot loops stay inlinable in its translation unit.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sluice::media {
namespace {

// ---- Tables fixed by the JPEG format and by libjpeg-turbo's arithmetic. ----

// Zigzag position -> natural (row-major) position in an 8x8 block.
std::array<uint8_t, 64> MakeNaturalOrder() {
  std::array<uint8_t, 64> nat{};
  int i = 0;
  for (int s = 0; s < 15; ++s) {  // anti-diagonals, alternating direction
    const int lo = std::max(0, s - 7), hi = std::min(s, 7);
    if (s % 2 == 0) {
      for (int r = hi; r >= lo; --r) nat[i++] = static_cast<uint8_t>(r * 8 + (s - r));
    } else {
      for (int r = lo; r <= hi; ++r) nat[i++] = static_cast<uint8_t>(r * 8 + (s - r));
    }
  }
  return nat;
}
const std::array<uint8_t, 64> kNatural = MakeNaturalOrder();

// libjpeg's post-IDCT range limit: the low 10 bits of the value, read as signed, plus 128,
// clamped to 0..255 (a corrupt value wraps around instead of saturating).
inline uint8_t IdctRangeLimit(int v) {
  const int m = v & 1023;
  const int s = (m ^ 512) - 512;
  const int x = s + 128;
  return static_cast<uint8_t>(x < 0 ? 0 : (x > 255 ? 255 : x));
}

// jpeg_idct_1x1: the DC coefficient (a JCOEF) times the quantisation value (an
// ISLOW_MULT_TYPE, a short in SIMD builds), descaled by 3 bits.
inline uint8_t Idct1x1(int16_t dc, int16_t q) {
  const int v = static_cast<int>(dc) * static_cast<int>(q);
  return IdctRangeLimit((v + 4) >> 3);
}

inline int16_t Sat16(int32_t v) {
  return static_cast<int16_t>(v < -32768 ? -32768 : (v > 32767 ? 32767 : v));
}
inline int32_t WrapAdd(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) + static_cast<uint32_t>(b));
}
inline int32_t WrapSub(int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) - static_cast<uint32_t>(b));
}
inline int32_t WrapShl(int32_t a, int n) {
  return static_cast<int32_t>(static_cast<uint32_t>(a) << n);
}

// The odd part of the 8-to-2 IDCT step (CONST_BITS 13): sqrt(2) * (c1+c3+c5+c7),
// -sqrt(2) * (-c1+c3-c5-c7), sqrt(2) * (-c1+c3+c5+c7), -sqrt(2) * (c7-c5+c3-c1).
constexpr int32_t kF362 = 29692, kF127 = 10426, kF085 = 6967, kF072 = 5906;
inline int32_t OddPart(int32_t z1, int32_t z3, int32_t z5, int32_t z7) {
  // |z| <= 32768: the sum stays within int32 (as the pmaddwd pairs do).
  return z1 * kF362 - z3 * kF127 + z5 * kF085 - z7 * kF072;
}

// Pass 2 of Idct2x2: one output row from pass 1's values at columns 0, 1, 3, 5, 7.
inline void Idct2x2Row(int32_t w0, int32_t w1, int32_t w3, int32_t w5, int32_t w7, uint8_t* out) {
  const int32_t tmp10 = WrapShl(w0, 15);
  const int32_t tmp0 = OddPart(Sat16(w1), Sat16(w3), Sat16(w5), Sat16(w7));
  const int32_t v0 = WrapAdd(WrapAdd(tmp10, tmp0), 1 << 19) >> 20;
  const int32_t v1 = WrapAdd(WrapSub(tmp10, tmp0), 1 << 19) >> 20;
  out[0] = static_cast<uint8_t>(std::clamp(v0, -128, 127) + 128);
  out[1] = static_cast<uint8_t>(std::clamp(v1, -128, 127) + 128);
}

// jsimd_idct_2x2 (libjpeg-turbo's SSE2 reduced IDCT, what x86-64 builds run), to the bit:
// 16-bit dequantisation (low half of coef * q), 32-bit wrap-around sums, the pass-1 results of
// columns 1, 3, 5, 7 saturated to 16 bits before pass 2, and the output saturated to
// -128..127 before adding 128. For in-range data this is jpeg_idct_2x2 exactly. Scalar: the
// reference (and the build without SSE2).
inline void Idct2x2Scalar(const int16_t* blk, const int16_t* q, uint8_t* out0, uint8_t* out1) {
  static constexpr int kCols[5] = {0, 1, 3, 5, 7};
  auto deq = [&](int i) {
    return static_cast<int32_t>(static_cast<int16_t>(static_cast<uint16_t>(
        static_cast<uint32_t>(static_cast<uint16_t>(blk[i])) * static_cast<uint16_t>(q[i]))));
  };
  // Pass-1 rows 0 and 1 at columns 0, 1, 3, 5, 7 (slots 0-4): only these are read, and
  // nothing is zeroed (a zero-initialised [8] compiled to two `rep stos` per block).
  int32_t a[5], b[5];
  for (int i = 0; i < 5; ++i) {
    const int c = kCols[i];
    const int32_t tmp10 = WrapShl(deq(c), 15);
    const int32_t tmp0 = OddPart(deq(8 + c), deq(24 + c), deq(40 + c), deq(56 + c));
    a[i] = WrapAdd(WrapAdd(tmp10, tmp0), 1 << 12) >> 13;
    b[i] = WrapAdd(WrapSub(tmp10, tmp0), 1 << 12) >> 13;
  }
  Idct2x2Row(a[0], a[1], a[2], a[3], a[4], out0);
  Idct2x2Row(b[0], b[1], b[2], b[3], b[4], out1);
}

#if defined(__SSE2__)
// The same with pass 1 on all 8 columns at once (SSE2, the x86-64 baseline): the low half of
// each 16-bit product (pmullw) is the dequantised value, and pmaddwd on (row 1, row 3) and
// (row 5, row 7) pairs gives the odd part exactly (|z| <= 32768: no sum leaves int32); the
// 32-bit adds wrap as WrapAdd does.
inline void Idct2x2(const int16_t* blk, const int16_t* q, uint8_t* out0, uint8_t* out1) {
  auto deq = [&](int r) {
    return _mm_mullo_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 8 * r)),
                           _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 8 * r)));
  };
  const __m128i d0 = deq(0), d1 = deq(1), d3 = deq(3), d5 = deq(5), d7 = deq(7);
  auto pair = [](int32_t lo, int32_t hi) {
    return _mm_set1_epi32(static_cast<int32_t>(
        static_cast<uint16_t>(lo) | (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16)));
  };
  const __m128i c13 = pair(kF362, -kF127), c57 = pair(kF085, -kF072);
  const __m128i round = _mm_set1_epi32(1 << 12);
  alignas(16) int32_t a[8], b[8];
  auto half = [&](__m128i e0, __m128i p13, __m128i p57, int at) {
    const __m128i tmp10 = _mm_slli_epi32(_mm_srai_epi32(e0, 16), 15);  // sign-extended << 15
    const __m128i tmp0 = _mm_add_epi32(_mm_madd_epi16(p13, c13), _mm_madd_epi16(p57, c57));
    _mm_store_si128(reinterpret_cast<__m128i*>(a + at),
                    _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(tmp10, tmp0), round), 13));
    _mm_store_si128(reinterpret_cast<__m128i*>(b + at),
                    _mm_srai_epi32(_mm_add_epi32(_mm_sub_epi32(tmp10, tmp0), round), 13));
  };
  half(_mm_unpacklo_epi16(d0, d0), _mm_unpacklo_epi16(d1, d3), _mm_unpacklo_epi16(d5, d7), 0);
  half(_mm_unpackhi_epi16(d0, d0), _mm_unpackhi_epi16(d1, d3), _mm_unpackhi_epi16(d5, d7), 4);
  // Pass 2 for both rows: packssdw saturates columns 1, 3, 5, 7 to 16 bits (Sat16), pmaddwd
  // against (0, c) pairs leaves their four products, summed across lanes (exact: no sum
  // leaves int32); column 0 is used unsaturated. The two outputs of each row, clamped to
  // -128..127 by the two saturating packs, then + 128.
  const __m128i va = _mm_packs_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(a)),
                                     _mm_load_si128(reinterpret_cast<const __m128i*>(a + 4)));
  const __m128i vb = _mm_packs_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(b)),
                                     _mm_load_si128(reinterpret_cast<const __m128i*>(b + 4)));
  const __m128i odd = _mm_setr_epi16(0, kF362, 0, -kF127, 0, kF085, 0, -kF072);
  const __m128i ma = _mm_madd_epi16(va, odd), mb = _mm_madd_epi16(vb, odd);
  // [a0+a2, a1+a3, b0+b2, b1+b3], then lanes 0 and 1 / 2 and 3 added: tmp0 of a and of b.
  __m128i t = _mm_add_epi32(_mm_unpacklo_epi64(ma, mb), _mm_unpackhi_epi64(ma, mb));
  t = _mm_add_epi32(t, _mm_shuffle_epi32(t, _MM_SHUFFLE(2, 3, 0, 1)));
  // [tmp0_a, -tmp0_a, tmp0_b, -tmp0_b] added to [tmp10_a, tmp10_a, tmp10_b, tmp10_b].
  const __m128i tmp0 =
      _mm_sub_epi32(_mm_xor_si128(t, _mm_setr_epi32(0, -1, 0, -1)), _mm_setr_epi32(0, -1, 0, -1));
  const __m128i tmp10 = _mm_slli_epi32(_mm_setr_epi32(a[0], a[0], b[0], b[0]), 15);
  const __m128i v =
      _mm_srai_epi32(_mm_add_epi32(_mm_add_epi32(tmp10, tmp0), _mm_set1_epi32(1 << 19)), 20);
  const __m128i v8 = _mm_packs_epi16(_mm_packs_epi32(v, v), _mm_setzero_si128());
  const uint32_t px =
      static_cast<uint32_t>(_mm_cvtsi128_si32(_mm_xor_si128(v8, _mm_set1_epi8(-128))));
  out0[0] = static_cast<uint8_t>(px);
  out0[1] = static_cast<uint8_t>(px >> 8);
  out1[0] = static_cast<uint8_t>(px >> 16);
  out1[1] = static_cast<uint8_t>(px >> 24);
}
#else
inline void Idct2x2(const int16_t* blk, const int16_t* q, uint8_t* out0, uint8_t* out1) {
  Idct2x2Scalar(blk, q, out0, out1);
}
#endif

// jdcolor.c's YCbCr -> RGB tables (SCALEBITS 16).
struct YccTables {
  int cr_r[256], cb_b[256];
  int32_t cr_g[256], cb_g[256];
  YccTables() {
    auto fix = [](double x) { return static_cast<int32_t>(x * 65536.0 + 0.5); };
    for (int i = 0; i < 256; ++i) {
      const int32_t x = i - 128;
      cr_r[i] = (fix(1.40200) * x + 32768) >> 16;
      cb_b[i] = (fix(1.77200) * x + 32768) >> 16;
      cr_g[i] = -fix(0.71414) * x;
      cb_g[i] = -fix(0.34414) * x + 32768;
    }
  }
};
inline uint8_t Clamp255(int v) { return static_cast<uint8_t>(v < 0 ? 0 : (v > 255 ? 255 : v)); }

// ---- Huffman decoding. ----

// One look-up of the next kLutBits bits gives, for a code of at most kLutBits bits, an entry:
//   bits 0-7: code length + extra bits (what skipping the symbol consumes),
//   bits 8-15: code length, bits 16-23: the symbol,
//   bits 24-31: AC position advance (run + 1 for a coefficient, 16 for ZRL, 128 for EOB).
// 0 means a longer code (or none): the canonical slow path.
constexpr int kLutBits = 10;

struct HuffSpec {
  bool defined = false;
  uint8_t counts[17] = {};  // [1..16]
  uint8_t values[256] = {};
};

// For skipping AC coefficients: every complete symbol (code + extra bits) within the next
// kMultiBits bits at once. Entry: bits 0-3 the bits they take (0: none fits), bits 4-10 the
// position advance that must still fit the block (k + it <= 64: the last coefficient at 63 at
// most; an EOB, which ends the entry, counts 1 so that it comes before position 64), bit 11 an
// EOB (the advance then also jumps past the block). 127 in bits 4-10 where no symbol fits.
constexpr int kMultiBits = 13;
// For AC coefficients with values (and DC differences): a code and its extra bits within the
// next kLutBits2 bits. Entry: bits 0-15 the value, 16-19 the bits taken (0: not here), 20-23
// the zero run before it (15 for ZRL, 0 for EOB), 24-31 the position advance (run + 1, 16 for
// ZRL, 128 for EOB).
constexpr int kValueBits = 12;

struct HuffTable {
  uint32_t lut[1 << kLutBits];
  uint16_t multi[1 << kMultiBits];  // AC tables only
  uint32_t value[1 << kValueBits];
  int32_t maxcode[18];    // largest code of each length, -1 when none
  int32_t valoffset[18];  // symbol index = code + valoffset[length]
  uint8_t values[256];
  bool dc = false;
};

inline int Extend(uint64_t bits, int s) {
  const int v = static_cast<int>(bits);
  return v < (1 << (s - 1)) ? v - (1 << s) + 1 : v;
}

uint32_t MakeEntry(int code_len, int sym, bool dc) {
  const int s = dc ? sym : (sym & 15);
  const int r = sym >> 4;
  uint32_t adv = 0;
  if (!dc) adv = s != 0 ? static_cast<uint32_t>(r + 1) : (r == 15 ? 16u : 128u);
  return static_cast<uint32_t>(code_len + s) | (static_cast<uint32_t>(code_len) << 8) |
         (static_cast<uint32_t>(sym) << 16) | (adv << 24);
}

void BuildMultiTable(HuffTable* t) {
  for (uint32_t i = 0; i < (1u << kMultiBits); ++i) {
    int pos = 0, apply = 0, check = 0;
    for (;;) {
      // The symbol at bit pos of the window, if its code and extra bits fit.
      int len = 0, sym = -1;
      for (int l = 1; l <= 16 && pos + l <= kMultiBits; ++l) {
        const int32_t code = static_cast<int32_t>((i >> (kMultiBits - pos - l)) & ((1u << l) - 1));
        if (code <= t->maxcode[l]) {
          len = l;
          sym = t->values[code + t->valoffset[l]];
          break;
        }
      }
      if (sym < 0) break;
      const int s = sym & 15, r = sym >> 4;
      if (pos + len + s > kMultiBits) break;
      if (s == 0 && r != 15) {  // EOB: must come before position 64
        pos += len;
        apply += 128;
        check += 1;
        break;
      }
      const int adv = s != 0 ? r + 1 : 16;
      if (check + adv > 63) break;  // near the block's end: one symbol at a time
      pos += len + s;
      apply += adv;
      check += adv;
    }
    t->multi[i] = static_cast<uint16_t>(
        pos == 0 ? (127 << 4) : pos | (check << 4) | (apply >= 128 ? 1 << 11 : 0));
  }
}

void BuildValueTable(HuffTable* t) {
  for (uint32_t i = 0; i < (1u << kValueBits); ++i) {
    uint32_t e = 0;
    for (int l = 1; l <= 16 && l <= kValueBits; ++l) {
      const int32_t code = static_cast<int32_t>(i >> (kValueBits - l));
      if (code > t->maxcode[l]) continue;
      const int sym = t->values[code + t->valoffset[l]];
      const int s = t->dc ? sym : (sym & 15), r = t->dc ? 0 : sym >> 4;
      if (l + s > kValueBits) break;
      int v = 0;
      if (s > 0) v = Extend((i >> (kValueBits - l - s)) & ((1u << s) - 1), s);
      int run = r, adv = r + 1;
      if (!t->dc && s == 0) {
        run = r == 15 ? 15 : 0;
        adv = r == 15 ? 16 : 128;
      }
      e = static_cast<uint32_t>(static_cast<uint16_t>(v)) | (static_cast<uint32_t>(l + s) << 16) |
          (static_cast<uint32_t>(run) << 20) | (static_cast<uint32_t>(adv) << 24);
      break;
    }
    t->value[i] = e;
  }
}

// Builds the decoding table, refusing what jpeg_make_d_derived_tbl refuses (a code space
// overflow; a DC symbol over 15).
bool BuildHuffTable(const HuffSpec& spec, bool dc, HuffTable* t) {
  t->dc = dc;
  std::memcpy(t->values, spec.values, sizeof(t->values));
  std::fill(std::begin(t->lut), std::end(t->lut), 0u);
  int32_t code = 0;
  int k = 0;
  for (int l = 1; l <= 16; ++l) {
    t->valoffset[l] = k - code;
    const int n = spec.counts[l];
    for (int i = 0; i < n; ++i, ++code, ++k) {
      const int sym = spec.values[k];
      if (dc && sym > 15) return false;
      if (l <= kLutBits) {
        const int shift = kLutBits - l;
        const uint32_t e = MakeEntry(l, sym, dc);
        for (int j = 0; j < (1 << shift); ++j) t->lut[(code << shift) | j] = e;
      }
    }
    t->maxcode[l] = n > 0 ? code - 1 : -1;
    if (code >= (int32_t{1} << l)) return false;
    code <<= 1;
  }
  t->maxcode[17] = 0x7FFFFFFF;
  t->valoffset[17] = 0;
  if (!dc) BuildMultiTable(t);
  BuildValueTable(t);
  return true;
}

// A code longer than kLutBits: the canonical search (F.2.2.3). 0 when no code matches.
uint32_t SlowEntry(const HuffTable& t, uint64_t buf) {
  for (int l = kLutBits + 1; l <= 16; ++l) {
    const int32_t code = static_cast<int32_t>(buf >> (64 - l));
    if (code <= t.maxcode[l]) {
      const int idx = code + t.valoffset[l];
      if (idx < 0 || idx > 255) return 0;
      return MakeEntry(l, t.values[idx], t.dc);
    }
  }
  return 0;
}

inline uint64_t LoadBE64(const uint8_t* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return __builtin_bswap64(v);
}

// MSB-first bit reader over unstuffed data followed by zero padding. After Refill() at least
// 56 bits are in `buf`; one symbol (code + extra bits) takes at most 31.
struct BitReader {
  uint64_t buf = 0;
  int bits = 0;
  const uint8_t* p = nullptr;
  const uint8_t* begin = nullptr;
  void Reset(const uint8_t* at) {
    buf = 0;
    bits = 0;
    p = begin = at;
  }
  inline void Refill() {
    buf |= LoadBE64(p) >> bits;
    p += (63 - bits) >> 3;
    bits |= 56;
  }
  inline void Drop(int n) {
    buf <<= n;
    bits -= n;
  }
  int64_t Consumed() const { return static_cast<int64_t>(p - begin) * 8 - bits; }
};

// The block decoders keep the reader's state in locals (registers) and write it back.
#define SLUICE_REFILL()         \
  do {                          \
    buf |= LoadBE64(p) >> bits; \
    p += (63 - bits) >> 3;      \
    bits |= 56;                 \
  } while (0)
#define SLUICE_DROP(n) \
  do {                 \
    buf <<= (n);       \
    bits -= (n);       \
  } while (0)

inline bool DecodeDcLocal(uint64_t& buf, int& bits, const uint8_t*& p, const HuffTable& t,
                          int* diff) {
  SLUICE_REFILL();
  const uint32_t f = t.value[buf >> (64 - kValueBits)];
  if (f != 0) {
    SLUICE_DROP(static_cast<int>((f >> 16) & 15));
    *diff = static_cast<int16_t>(f & 0xFFFF);
    return true;
  }
  uint32_t e = t.lut[buf >> (64 - kLutBits)];
  if (e == 0 && (e = SlowEntry(t, buf)) == 0) return false;
  const int cl = (e >> 8) & 0xFF, s = (e >> 16) & 0xFF;
  SLUICE_DROP(cl);
  if (s == 0) {
    *diff = 0;
  } else {
    *diff = Extend(buf >> (64 - s), s);
    SLUICE_DROP(s);
  }
  return true;
}

// A block whose output needs only its DC: the DC difference, then the AC coefficients parsed
// (several short symbols per look-up, three look-ups per refill), not computed.
__attribute__((noinline)) bool SkipBlock(BitReader& br, const HuffTable& dct, const HuffTable& act,
                                         int* diff) {
  uint64_t buf = br.buf;
  int bits = br.bits;
  const uint8_t* p = br.p;
  if (!DecodeDcLocal(buf, bits, p, dct, diff)) return false;
  int k = 1;
  for (;;) {
    SLUICE_REFILL();  // >= 56 bits: three look-ups of at most 12
#define SLUICE_MULTI_STEP()                                 \
  {                                                         \
    const uint32_t m = act.multi[buf >> (64 - kMultiBits)]; \
    const int chk = static_cast<int>((m >> 4) & 127);       \
    if (k + chk > 64) goto single;                          \
    SLUICE_DROP(static_cast<int>(m & 15));                  \
    k += chk + static_cast<int>((m >> 11) & 1) * 127;       \
    if (k >= 64) goto done;                                 \
  }
    SLUICE_MULTI_STEP()
    SLUICE_MULTI_STEP()
    SLUICE_MULTI_STEP()
#undef SLUICE_MULTI_STEP
    continue;
  single : {
    SLUICE_REFILL();
    uint32_t e = act.lut[buf >> (64 - kLutBits)];
    if (e == 0 && (e = SlowEntry(act, buf)) == 0) return false;
    SLUICE_DROP(static_cast<int>(e & 0xFF));
    k += static_cast<int>(e >> 24);
    if (k >= 64) {
      // A coefficient past position 63 (libjpeg would store it at 63): not handled.
      if (k > 64 && k < 128 && ((e >> 16) & 15) != 0) return false;
      goto done;
    }
  }
  }
done:
  br.buf = buf;
  br.bits = bits;
  br.p = p;
  return true;
}

// Natural order with positions 64-79 (a ZRL's target past the block) sent to a spare slot.
std::array<uint8_t, 80> MakeNaturalOrderPadded() {
  std::array<uint8_t, 80> n{};
  for (int i = 0; i < 80; ++i)
    n[static_cast<size_t>(i)] = i < 64 ? kNatural[static_cast<size_t>(i)] : 64;
  return n;
}
const std::array<uint8_t, 80> kNaturalPadded = MakeNaturalOrderPadded();

// A block whose AC coefficients the output needs: into blk (natural order; the entries the
// IDCT reads zeroed by the caller; [64] is scratch). A ZRL or EOB writes a zero where no
// coefficient is yet.
__attribute__((noinline)) bool DecodeBlock(BitReader& br, const HuffTable& dct,
                                           const HuffTable& act, int* diff, int16_t* blk) {
  uint64_t buf = br.buf;
  int bits = br.bits;
  const uint8_t* p = br.p;
  if (!DecodeDcLocal(buf, bits, p, dct, diff)) return false;
  int k = 1;
  uint32_t f = 0;
  while (k < 64) {
    SLUICE_REFILL();
    f = act.value[buf >> (64 - kValueBits)];
    if (f == 0) {  // a long code or value: the general path
      uint32_t e = act.lut[buf >> (64 - kLutBits)];
      if (e == 0 && (e = SlowEntry(act, buf)) == 0) return false;
      const int cl = (e >> 8) & 0xFF, sym = (e >> 16) & 0xFF;
      const int s = sym & 15, r = sym >> 4;
      SLUICE_DROP(cl);
      if (s != 0) {
        k += r;
        if (k > 63) return false;
        blk[kNatural[static_cast<size_t>(k)]] = static_cast<int16_t>(Extend(buf >> (64 - s), s));
        SLUICE_DROP(s);
        ++k;
      } else {
        if (r != 15) break;
        k += 16;
      }
      continue;
    }
    SLUICE_DROP(static_cast<int>((f >> 16) & 15));
    blk[kNaturalPadded[static_cast<size_t>(k + static_cast<int>((f >> 20) & 15))]] =
        static_cast<int16_t>(f & 0xFFFF);
    k += static_cast<int>(f >> 24);
  }
  // A coefficient past position 63: not handled.
  if (k > 64 && k < 128 && f != 0 && (f >> 24) <= 16 && (f & 0xFFFF) != 0) return false;
  br.buf = buf;
  br.bits = bits;
  br.p = p;
  return true;
}
#undef SLUICE_REFILL
#undef SLUICE_DROP

}  // namespace
}  // namespace sluice::media
