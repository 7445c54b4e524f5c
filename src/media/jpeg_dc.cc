#include "media/jpeg_dc.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

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

// jsimd_idct_2x2 (libjpeg-turbo's SSE2 reduced IDCT, what x86-64 builds run), to the bit:
// 16-bit dequantisation (low half of coef * q), 32-bit wrap-around sums, the pass-1 results of
// columns 1, 3, 5, 7 saturated to 16 bits before pass 2, and the output saturated to
// -128..127 before adding 128. For in-range data this is jpeg_idct_2x2 exactly.
void Idct2x2(const int16_t* blk, const int16_t* q, uint8_t* out0, uint8_t* out1) {
  static constexpr int kCols[5] = {0, 1, 3, 5, 7};
  auto deq = [&](int i) {
    return static_cast<int32_t>(static_cast<int16_t>(static_cast<uint16_t>(
        static_cast<uint32_t>(static_cast<uint16_t>(blk[i])) * static_cast<uint16_t>(q[i]))));
  };
  int32_t a[8] = {}, b[8] = {};  // pass-1 rows 0 and 1, columns 0, 1, 3, 5, 7
  for (int c : kCols) {
    const int32_t tmp10 = WrapShl(deq(c), 15);
    const int32_t tmp0 = OddPart(deq(8 + c), deq(24 + c), deq(40 + c), deq(56 + c));
    a[c] = WrapAdd(WrapAdd(tmp10, tmp0), 1 << 12) >> 13;
    b[c] = WrapAdd(WrapSub(tmp10, tmp0), 1 << 12) >> 13;
  }
  auto row = [](const int32_t* w, uint8_t* out) {
    const int32_t tmp10 = WrapShl(w[0], 15);
    const int32_t tmp0 = OddPart(Sat16(w[1]), Sat16(w[3]), Sat16(w[5]), Sat16(w[7]));
    const int32_t v0 = WrapAdd(WrapAdd(tmp10, tmp0), 1 << 19) >> 20;
    const int32_t v1 = WrapAdd(WrapSub(tmp10, tmp0), 1 << 19) >> 20;
    out[0] = static_cast<uint8_t>(std::clamp(v0, -128, 127) + 128);
    out[1] = static_cast<uint8_t>(std::clamp(v1, -128, 127) + 128);
  };
  row(a, out0);
  row(b, out1);
}

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

// ---- Markers and the decoder proper. ----

constexpr int kMaxDimension = 65500;  // JPEG_MAX_DIMENSION
constexpr size_t kPadding = 8192;     // > the most one MCU can read (10 blocks * 65 refills * 7)

struct Component {
  int id = 0, h = 1, v = 1, tq = 0;
  int rh = 1, rv = 1;  // max sampling / own sampling
  bool idct2 = false;  // 2x2 IDCT: subsampled 2x2
  int wblocks = 0, hblocks = 0;
  int stride = 0;
  std::vector<uint8_t> plane;
  bool scanned = false;
};

class Decoder {
 public:
  Decoder(const uint8_t* data, size_t size) : d_(data), end_(data + size) {}
  bool Run(const DecodeOptions& limits, Image* out);

 private:
  bool ReadU16(const uint8_t*& p, int* v) const {
    if (end_ - p < 2) return false;
    *v = (p[0] << 8) | p[1];
    p += 2;
    return true;
  }
  bool Segment(const uint8_t*& p, const uint8_t** body, size_t* len) const {
    int n = 0;
    if (!ReadU16(p, &n) || n < 2 || end_ - p < n - 2) return false;
    *body = p;
    *len = static_cast<size_t>(n - 2);
    p += n - 2;
    return true;
  }
  bool ReadDqt(const uint8_t* b, size_t n);
  bool ReadDht(const uint8_t* b, size_t n);
  bool ReadSof(const uint8_t* b, size_t n, const DecodeOptions& limits);
  bool ReadSos(const uint8_t* b, size_t n, const uint8_t*& p);
  bool DecodeScan(const std::vector<int>& comps, const int* dc_tbl, const int* ac_tbl,
                  const uint8_t*& p);
  void Output(Image* out) const;

  const uint8_t* d_;
  const uint8_t* end_;
  bool quant_defined_[4] = {};
  int16_t quant_[4][64] = {};  // natural order, as ISLOW_MULT_TYPE (short)
  HuffSpec dc_spec_[4], ac_spec_[4];
  int restart_interval_ = 0;
  bool jfif_ = false, adobe_ = false;
  int adobe_transform_ = 0;
  bool have_sof_ = false, seen_sos_ = false;
  int width_ = 0, height_ = 0, max_h_ = 1, max_v_ = 1;
  int mcus_per_row_ = 0, mcu_rows_ = 0;
  std::vector<Component> comps_;
  std::vector<uint8_t> scan_;  // unstuffed entropy-coded data + padding
  std::vector<size_t> seg_end_;
  std::vector<HuffTable> dc_tables_ = std::vector<HuffTable>(4);  // on the heap: 20 KB each
  std::vector<HuffTable> ac_tables_ = std::vector<HuffTable>(4);
};

bool Decoder::ReadDqt(const uint8_t* b, size_t n) {
  size_t i = 0;
  while (i < n) {
    const int pq = b[i] >> 4, tq = b[i] & 15;
    ++i;
    if (tq > 3 || pq > 1) return false;
    const size_t bytes = pq ? 128 : 64;
    if (n - i < bytes) return false;  // libjpeg pads a short table with 1s: not handled
    for (int k = 0; k < 64; ++k) {
      const int q = pq ? (b[i + 2 * k] << 8) | b[i + 2 * k + 1] : b[i + k];
      quant_[tq][kNatural[k]] = static_cast<int16_t>(static_cast<uint16_t>(q));
    }
    quant_defined_[tq] = true;
    i += bytes;
  }
  return true;
}

bool Decoder::ReadDht(const uint8_t* b, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (n - i < 17) return false;
    const int tc = b[i] >> 4, th = b[i] & 15;
    if (tc > 1 || th > 3) return false;
    HuffSpec& s = tc == 0 ? dc_spec_[th] : ac_spec_[th];
    int total = 0;
    for (int l = 1; l <= 16; ++l) {
      s.counts[l] = b[i + static_cast<size_t>(l)];
      total += s.counts[l];
    }
    i += 17;
    if (total > 256 || n - i < static_cast<size_t>(total)) return false;
    std::memset(s.values, 0, sizeof(s.values));
    std::memcpy(s.values, b + i, static_cast<size_t>(total));
    s.defined = true;
    i += static_cast<size_t>(total);
  }
  return true;
}

bool Decoder::ReadSof(const uint8_t* b, size_t n, const DecodeOptions& limits) {
  if (have_sof_ || n < 6) return false;
  have_sof_ = true;
  if (b[0] != 8) return false;
  height_ = (b[1] << 8) | b[2];
  width_ = (b[3] << 8) | b[4];
  const int nc = b[5];
  if (height_ <= 0 || width_ <= 0 || height_ > kMaxDimension || width_ > kMaxDimension) {
    return false;
  }
  if (width_ > limits.max_side || height_ > limits.max_side ||
      static_cast<int64_t>(width_) * height_ > limits.max_pixels) {
    return false;
  }
  if ((nc != 1 && nc != 3) || n != 6 + 3 * static_cast<size_t>(nc)) return false;
  comps_.resize(static_cast<size_t>(nc));
  for (int c = 0; c < nc; ++c) {
    Component& k = comps_[static_cast<size_t>(c)];
    k.id = b[6 + 3 * c];
    k.h = b[7 + 3 * c] >> 4;
    k.v = b[7 + 3 * c] & 15;
    k.tq = b[8 + 3 * c];
    if (k.h < 1 || k.h > 2 || k.v < 1 || k.v > 2 || k.tq > 3) return false;
    for (int o = 0; o < c; ++o) {
      if (comps_[static_cast<size_t>(o)].id == k.id) return false;
    }
    max_h_ = std::max(max_h_, k.h);
    max_v_ = std::max(max_v_, k.v);
  }
  mcus_per_row_ = (width_ + 8 * max_h_ - 1) / (8 * max_h_);
  mcu_rows_ = (height_ + 8 * max_v_ - 1) / (8 * max_v_);
  for (Component& k : comps_) {
    k.rh = max_h_ / k.h;
    k.rv = max_v_ / k.v;
    k.idct2 = k.rh == 2 && k.rv == 2;
    k.wblocks =
        static_cast<int>((static_cast<int64_t>(width_) * k.h + 8 * max_h_ - 1) / (8 * max_h_));
    k.hblocks =
        static_cast<int>((static_cast<int64_t>(height_) * k.v + 8 * max_v_ - 1) / (8 * max_v_));
    const int ss = k.idct2 ? 2 : 1;
    k.stride = mcus_per_row_ * k.h * ss;
    k.plane.assign(static_cast<size_t>(k.stride) * mcu_rows_ * k.v * ss, 0);
  }
  return true;
}

// Copies the entropy-coded data at p (up to the marker that ends it) without the stuffed
// zero bytes, splitting it at restart markers (which must come in order). Leaves p at the
// marker that ended the scan (or the end of the data).
bool Decoder::ReadSos(const uint8_t* b, size_t n, const uint8_t*& p) {
  if (!have_sof_ || n < 1) return false;
  const int ns = b[0];
  if (ns < 1 || ns > 4 || n != 4 + 2 * static_cast<size_t>(ns)) return false;
  std::vector<int> comps;
  int dc_tbl[4] = {}, ac_tbl[4] = {};
  int blocks = 0;
  for (int i = 0; i < ns; ++i) {
    const int id = b[1 + 2 * i];
    int ci = -1;
    for (size_t c = 0; c < comps_.size(); ++c) {
      if (comps_[c].id == id) ci = static_cast<int>(c);
    }
    if (ci < 0 || comps_[static_cast<size_t>(ci)].scanned) return false;
    for (int o : comps) {
      if (o == ci) return false;
    }
    comps.push_back(ci);
    dc_tbl[i] = b[2 + 2 * i] >> 4;
    ac_tbl[i] = b[2 + 2 * i] & 15;
    if (dc_tbl[i] > 3 || ac_tbl[i] > 3) return false;
    const Component& k = comps_[static_cast<size_t>(ci)];
    blocks += ns == 1 ? 1 : k.h * k.v;
  }
  if (blocks > 10) return false;  // D_MAX_BLOCKS_IN_MCU
  const int ss = b[1 + 2 * ns], se = b[2 + 2 * ns], ahal = b[3 + 2 * ns];
  if (ss != 0 || se != 63 || ahal != 0) return false;
  return DecodeScan(comps, dc_tbl, ac_tbl, p);
}

bool Decoder::DecodeScan(const std::vector<int>& comps, const int* dc_tbl, const int* ac_tbl,
                         const uint8_t*& p) {
  const size_t ns = comps.size();
  for (size_t i = 0; i < ns; ++i) {
    const Component& k = comps_[static_cast<size_t>(comps[i])];
    if (!quant_defined_[k.tq]) return false;
    if (!dc_spec_[dc_tbl[i]].defined || !ac_spec_[ac_tbl[i]].defined) return false;
    if (!BuildHuffTable(dc_spec_[dc_tbl[i]], true, &dc_tables_[i])) return false;
    if (!BuildHuffTable(ac_spec_[ac_tbl[i]], false, &ac_tables_[i])) return false;
  }
  // Unstuff up to the marker that ends the scan.
  scan_.clear();
  scan_.reserve(static_cast<size_t>(end_ - p) + kPadding);
  seg_end_.clear();
  int next_rst = 0;
  while (p < end_) {
    const uint8_t* ff = static_cast<const uint8_t*>(std::memchr(p, 0xFF, end_ - p));
    const uint8_t* stop = ff != nullptr ? ff : end_;
    scan_.insert(scan_.end(), p, stop);
    p = stop;
    if (ff == nullptr) break;
    if (end_ - ff < 2) break;  // a lone 0xFF at the very end: left for the marker check
    const uint8_t m = ff[1];
    if (m == 0x00) {
      scan_.push_back(0xFF);
      p = ff + 2;
    } else if (m >= 0xD0 && m <= 0xD7) {
      if (m - 0xD0 != next_rst) return false;
      next_rst = (next_rst + 1) & 7;
      seg_end_.push_back(scan_.size());
      p = ff + 2;
    } else {
      break;  // the marker after the scan (0xFF 0xFF included: not handled later)
    }
  }
  seg_end_.push_back(scan_.size());
  const size_t data_size = scan_.size();
  scan_.resize(data_size + kPadding, 0);

  // MCU geometry.
  int64_t mcus_x, mcus_y;
  if (ns == 1) {
    const Component& k = comps_[static_cast<size_t>(comps[0])];
    mcus_x = k.wblocks;
    mcus_y = k.hblocks;
  } else {
    mcus_x = mcus_per_row_;
    mcus_y = mcu_rows_;
  }
  const int64_t total = mcus_x * mcus_y;
  const int64_t ri = restart_interval_;
  const int64_t segments = ri > 0 ? (total + ri - 1) / ri : 1;
  if (static_cast<int64_t>(seg_end_.size()) != segments) return false;

  const uint8_t* base = scan_.data();
  const uint8_t* data_end = base + data_size;
  size_t seg = 0;
  // Whether the segment just decoded stayed within its data (libjpeg pads with zeros and
  // warns where it does not).
  auto within = [&](const BitReader& r) {
    const size_t start = seg == 0 ? 0 : seg_end_[seg - 1];
    return r.Consumed() <= static_cast<int64_t>(seg_end_[seg] - start) * 8;
  };
  BitReader br;
  br.Reset(base);
  int dc_pred[4] = {};
  int64_t to_go = ri;
  alignas(32) int16_t blk[72];
  for (int64_t m = 0; m < total; ++m) {
    if (ri > 0) {
      if (to_go == 0) {
        if (!within(br)) return false;
        ++seg;
        br.Reset(base + seg_end_[seg - 1]);
        std::fill(std::begin(dc_pred), std::end(dc_pred), 0);
        to_go = ri;
      }
      --to_go;
    }
    const int64_t mx = m % mcus_x, my = m / mcus_x;
    for (size_t i = 0; i < ns; ++i) {
      Component& k = comps_[static_cast<size_t>(comps[i])];
      const int bh = ns == 1 ? 1 : k.h, bv = ns == 1 ? 1 : k.v;
      const int16_t* q = quant_[k.tq];
      for (int yy = 0; yy < bv; ++yy) {
        for (int xx = 0; xx < bh; ++xx) {
          const int64_t bx = mx * bh + xx, by = my * bv + yy;
          int diff;
          if (k.idct2) {
            // Idct2x2 reads rows 0, 1, 3, 5 and 7 only: what lands elsewhere is never read.
            for (int r : {0, 1, 3, 5, 7}) std::memset(blk + 8 * r, 0, 8 * sizeof(int16_t));
            if (!DecodeBlock(br, dc_tables_[i], ac_tables_[i], &diff, blk)) return false;
          } else if (!SkipBlock(br, dc_tables_[i], ac_tables_[i], &diff)) {
            return false;
          }
          dc_pred[i] += diff;
          if (dc_pred[i] > (1 << 30) || dc_pred[i] < -(1 << 30)) return false;
          const int16_t dc = static_cast<int16_t>(static_cast<uint16_t>(dc_pred[i]));
          if (k.idct2) {
            blk[0] = dc;
            uint8_t* o = k.plane.data() + (2 * by) * k.stride + 2 * bx;
            Idct2x2(blk, q, o, o + k.stride);
          } else {
            k.plane[static_cast<size_t>(by * k.stride + bx)] = Idct1x1(dc, q[0]);
          }
        }
      }
    }
    // p runs up to 8 bytes ahead of what is consumed; the exact check is within() below.
    if (br.p > data_end + 16) return false;
  }
  if (!within(br)) return false;
  if (seg + 1 != seg_end_.size()) return false;
  for (int c : comps) comps_[static_cast<size_t>(c)].scanned = true;
  return true;
}

void Decoder::Output(Image* out) const {
  const int ow = (width_ + 7) / 8, oh = (height_ + 7) / 8;
  out->width = ow;
  out->height = oh;
  out->rgb.resize(static_cast<size_t>(ow) * oh * 3);
  uint8_t* dst = out->rgb.data();
  // A component's output row r and column x: its own sample (2x2 IDCT or full size), or the
  // one replicated from r / 2, x / 2 (box upsampling: fancy upsampling is off at 1/8).
  auto row_of = [](const Component& k, int r) {
    const int shift = k.idct2 ? 0 : k.rv - 1;
    return k.plane.data() + static_cast<size_t>(r >> shift) * k.stride;
  };
  auto xshift = [](const Component& k) { return k.idct2 ? 0 : k.rh - 1; };
  const Component& y = comps_[0];
  const int ys = xshift(y);
  if (comps_.size() == 1) {
    for (int r = 0; r < oh; ++r) {
      const uint8_t* src = row_of(y, r);
      for (int x = 0; x < ow; ++x, dst += 3) dst[0] = dst[1] = dst[2] = src[x >> ys];
    }
    return;
  }
  static const YccTables t;
  const Component& cb = comps_[1];
  const Component& cr = comps_[2];
  const int us = xshift(cb), vs = xshift(cr);
  for (int r = 0; r < oh; ++r) {
    const uint8_t* py = row_of(y, r);
    const uint8_t* pu = row_of(cb, r);
    const uint8_t* pv = row_of(cr, r);
    for (int x = 0; x < ow; ++x, dst += 3) {
      const int yy = py[x >> ys], u = pu[x >> us], v = pv[x >> vs];
      dst[0] = Clamp255(yy + t.cr_r[v]);
      dst[1] = Clamp255(yy + ((t.cb_g[u] + t.cr_g[v]) >> 16));
      dst[2] = Clamp255(yy + t.cb_b[u]);
    }
  }
}

bool Decoder::Run(const DecodeOptions& limits, Image* out) {
  const uint8_t* p = d_;
  if (end_ - p < 2 || p[0] != 0xFF || p[1] != 0xD8) return false;
  p += 2;
  for (;;) {
    if (end_ - p < 2 || p[0] != 0xFF) return false;
    while (p < end_ && *p == 0xFF) ++p;  // fill bytes
    if (p >= end_) return false;
    const uint8_t m = *p++;
    const uint8_t* body = nullptr;
    size_t len = 0;
    if (m == 0xD9) break;  // EOI
    if (!Segment(p, &body, &len)) return false;
    if (m == 0xDB) {
      if (!ReadDqt(body, len)) return false;
    } else if (m == 0xC4) {
      if (!ReadDht(body, len)) return false;
    } else if (m == 0xDD) {
      if (len != 2) return false;
      restart_interval_ = (body[0] << 8) | body[1];
    } else if (m == 0xC0 || m == 0xC1) {
      if (!ReadSof(body, len, limits)) return false;
    } else if (m == 0xDA) {
      if (!ReadSos(body, len, p)) return false;
      seen_sos_ = true;
    } else if (m == 0xE0) {
      // libjpeg guesses the colour space from the markers before the first scan.
      if (!seen_sos_ && len >= 14 && std::memcmp(body, "JFIF\0", 5) == 0) jfif_ = true;
    } else if (m == 0xEE) {
      if (!seen_sos_ && len >= 12 && std::memcmp(body, "Adobe", 5) == 0) {
        adobe_ = true;
        adobe_transform_ = body[11];
      }
    } else if ((m >= 0xE1 && m <= 0xEF) || m == 0xFE) {
      // other APPn, COM: skipped
    } else {
      return false;  // SOF2+, DAC, DNL, RSTn out of a scan, JPGn, ...
    }
  }
  if (!have_sof_) return false;
  for (const Component& k : comps_) {
    if (!k.scanned) return false;
  }
  if (comps_.size() == 3) {
    // jdapimin.c's colour space guess, where it says YCbCr for sure.
    bool ycc;
    if (jfif_) {
      ycc = true;
    } else if (adobe_) {
      ycc = adobe_transform_ == 1;
    } else {
      ycc = comps_[0].id == 1 && comps_[1].id == 2 && comps_[2].id == 3;
    }
    if (!ycc) return false;
  }
  Output(out);
  return true;
}

}  // namespace

bool DecodeJpegEighth(std::string_view bytes, const DecodeOptions& limits, Image* out) {
  Decoder d(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  return d.Run(limits, out);
}

}  // namespace sluice::media
