#include "media/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace sluice::media {

namespace {

// The filters as Pillow defines them (double precision), with their supports.
double BoxFilter(double x) { return x > -0.5 && x <= 0.5 ? 1.0 : 0.0; }
double BilinearFilter(double x) {
  x = std::fabs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}
double HammingFilter(double x) {
  x = std::fabs(x);
  if (x == 0.0) return 1.0;
  if (x >= 1.0) return 0.0;
  x *= M_PI;
  return std::sin(x) / x * (0.54f + 0.46f * std::cos(x));
}
double BicubicFilter(double x) {
  constexpr double a = -0.5;  // Keys' cubic convolution
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
  if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
  return 0.0;
}
double Sinc(double x) {
  if (x == 0.0) return 1.0;
  x *= M_PI;
  return std::sin(x) / x;
}
double LanczosFilter(double x) { return -3.0 <= x && x < 3.0 ? Sinc(x) * Sinc(x / 3) : 0.0; }

struct Filter {
  double (*fn)(double);
  double support;
};
Filter FilterOf(ResampleFilter f) {
  switch (f) {
    case ResampleFilter::kBox:
      return {BoxFilter, 0.5};
    case ResampleFilter::kBilinear:
      return {BilinearFilter, 1.0};
    case ResampleFilter::kHamming:
      return {HammingFilter, 1.0};
    case ResampleFilter::kLanczos:
      return {LanczosFilter, 3.0};
    case ResampleFilter::kBicubic:
      break;
  }
  return {BicubicFilter, 2.0};
}

constexpr int kPrecisionBits = 32 - 8 - 2;  // 8-bit results; 2 bits of headroom

// Per output pixel: the first source pixel, the count, and `ksize` fixed-point weights.
struct Coeffs {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<int32_t> k;
};

// The weights of out_size output pixels over in_size source pixels (the box 0..in_size).
Coeffs Precompute(int in_size, int out_size, const Filter& filter) {
  const double scale = static_cast<double>(in_size) / out_size;
  const double filterscale = std::max(scale, 1.0);
  const double support = filter.support * filterscale;
  Coeffs c;
  c.ksize = static_cast<int>(std::ceil(support)) * 2 + 1;
  c.first.resize(out_size);
  c.count.resize(out_size);
  c.k.assign(static_cast<size_t>(out_size) * c.ksize, 0);
  std::vector<double> w(c.ksize);
  const double ss = 1.0 / filterscale;
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = (xx + 0.5) * scale;
    int xmin = static_cast<int>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      w[x] = filter.fn((x + xmin - center + 0.5) * ss);
      ww += w[x];
    }
    int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
    for (int x = 0; x < xmax; ++x) {
      const double v = ww != 0.0 ? w[x] / ww : w[x];
      // Rounded half away from zero to fixed point.
      k[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits)
                                        : 0.5 + v * (1 << kPrecisionBits));
    }
    c.first[xx] = xmin;
    c.count[xx] = xmax;
  }
  return c;
}

inline uint8_t Clip8(int v) {
  const int s = v >> kPrecisionBits;  // arithmetic shift: floor
  return static_cast<uint8_t>(s < 0 ? 0 : (s > 255 ? 255 : s));
}

// The horizontal pass over `rows` rows of `in` from row y_first into tmp (out_w wide).
void HorizontalScalar(const Image& in, int y_first, const Coeffs& ch, Image* tmp) {
  const int out_w = tmp->width;
  for (int y = 0; y < tmp->height; ++y) {
    const uint8_t* row = in.pixel(0, y + y_first);
    uint8_t* out = tmp->rgb.data() + static_cast<size_t>(y) * out_w * 3;
    for (int xx = 0; xx < out_w; ++xx) {
      const int32_t* k = &ch.k[static_cast<size_t>(xx) * ch.ksize];
      const uint8_t* p = row + static_cast<size_t>(ch.first[xx]) * 3;
      int s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
      for (int x = 0; x < ch.count[xx]; ++x) {
        s0 += p[3 * x] * k[x];
        s1 += p[3 * x + 1] * k[x];
        s2 += p[3 * x + 2] * k[x];
      }
      out[3 * xx] = Clip8(s0);
      out[3 * xx + 1] = Clip8(s1);
      out[3 * xx + 2] = Clip8(s2);
    }
  }
}

// The vertical pass: out's rows from src's rows (src's row 0 is source row row_offset).
void VerticalScalar(const Image& src, int row_offset, const Coeffs& cv, Image* out) {
  const size_t stride = static_cast<size_t>(src.width) * 3;
  for (int yy = 0; yy < out->height; ++yy) {
    const int32_t* k = &cv.k[static_cast<size_t>(yy) * cv.ksize];
    const uint8_t* base = src.rgb.data() + static_cast<size_t>(cv.first[yy] - row_offset) * stride;
    uint8_t* o = out->rgb.data() + static_cast<size_t>(yy) * stride;
    for (size_t i = 0; i < stride; ++i) {
      int s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < cv.count[yy]; ++y) s += base[static_cast<size_t>(y) * stride + i] * k[y];
      o[i] = Clip8(s);
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define SLUICE_RESIZE_AVX2 1

// AVX2 passes. The sums are those of the scalar passes in another order: int32 addition is
// exact (and, were a sum ever to leave int32, the same modulo 2^32 in any order), so the
// bytes are identical.
//
// Horizontal: two source rows per register (one per 128-bit half), four taps per step. A
// 16-byte load at pixel x holds pixels x..x+3 (12 bytes); two byte shuffles make, per
// channel, the int16 pairs (p[x], p[x+1]) and (p[x+2], p[x+3]) (a 4th, zero lane: 3
// channels in 4 int32 lanes), and vpmaddwd multiplies each pair by a pair of weights and
// adds. The 22-bit weight does not fit int16, so k = kh * 2^11 + kl (kl in 0..2047, kh =
// k >> 11) and two products, recombined as (sum_hi << 11) + sum_lo: exact.
constexpr int kLoBits = 11;

struct HCoeffs {
  int groups = 0;  // per output pixel, ceil(ksize / 4) steps of 4 taps
  // Per output pixel and step: (kh[x], kh[x+1]), (kl[x], kl[x+1]), (kh[x+2], kh[x+3]),
  // (kl[x+2], kl[x+3]), each pair an int32 (first tap in the low half); taps past the
  // pixel's count have weight 0.
  std::vector<uint32_t> w;
};

uint32_t Pair(int lo, int hi) {
  return static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
         static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16;
}

HCoeffs SplitCoeffs(const Coeffs& c, int out_size) {
  HCoeffs h;
  h.groups = (c.ksize + 3) / 4;
  h.w.assign(static_cast<size_t>(out_size) * h.groups * 4, 0);
  for (int xx = 0; xx < out_size; ++xx) {
    const int32_t* k = &c.k[static_cast<size_t>(xx) * c.ksize];
    auto tap = [&](int x, bool high) {
      if (x >= c.count[xx]) return 0;
      return high ? k[x] >> kLoBits : k[x] & ((1 << kLoBits) - 1);
    };
    uint32_t* w = &h.w[static_cast<size_t>(xx) * h.groups * 4];
    for (int g = 0; g < h.groups; ++g) {
      const int x = 4 * g;
      w[4 * g] = Pair(tap(x, true), tap(x + 1, true));
      w[4 * g + 1] = Pair(tap(x, false), tap(x + 1, false));
      w[4 * g + 2] = Pair(tap(x + 2, true), tap(x + 3, true));
      w[4 * g + 3] = Pair(tap(x + 2, false), tap(x + 3, false));
    }
  }
  return h;
}

__attribute__((target("avx2"))) void HorizontalAvx2(const Image& in, int y_first, const Coeffs& ch,
                                                    Image* tmp) {
  const int out_w = tmp->width;
  const HCoeffs hc = SplitCoeffs(ch, out_w);
  const size_t in_stride = static_cast<size_t>(in.width) * 3;
  // A step reads 16 bytes from a pixel that may be the row's last: up to 13 bytes past the
  // row, harmless inside the image (weights 0) but not past its end; such rows are copied.
  std::vector<uint8_t> pad0(in_stride + 16), pad1(in_stride + 16);
  const uint8_t* end = in.rgb.data() + in.rgb.size();
  auto row_at = [&](int y, std::vector<uint8_t>* pad) {
    const uint8_t* r = in.pixel(0, y);
    if (r + in_stride + 16 <= end) return r;
    std::copy(r, r + in_stride, pad->data());
    return static_cast<const uint8_t*>(pad->data());
  };
  const __m128i mask_a = _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1);
  const __m128i mask_b = _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1);
  const __m256i sa = _mm256_broadcastsi128_si256(mask_a);
  const __m256i sb = _mm256_broadcastsi128_si256(mask_b);
  const __m256i bias = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  for (int y = 0; y < tmp->height; y += 2) {
    const bool two = y + 1 < tmp->height;
    const uint8_t* r0 = row_at(y + y_first, &pad0);
    const uint8_t* r1 = two ? row_at(y + 1 + y_first, &pad1) : r0;
    uint8_t* o0 = tmp->rgb.data() + static_cast<size_t>(y) * out_w * 3;
    uint8_t* o1 = o0 + static_cast<size_t>(out_w) * 3;
    for (int xx = 0; xx < out_w; ++xx) {
      const uint32_t* w = &hc.w[static_cast<size_t>(xx) * hc.groups * 4];
      const int steps = (ch.count[xx] + 3) / 4;
      const size_t at = static_cast<size_t>(ch.first[xx]) * 3;
      const uint8_t* p0 = r0 + at;
      const uint8_t* p1 = r1 + at;
      __m256i hi = _mm256_setzero_si256(), lo = _mm256_setzero_si256();
      for (int g = 0; g < steps; ++g) {
        const __m256i v = _mm256_inserti128_si256(
            _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + 12 * g))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + 12 * g)), 1);
        const __m256i a = _mm256_shuffle_epi8(v, sa);
        const __m256i b = _mm256_shuffle_epi8(v, sb);
        const uint32_t* wg = w + 4 * g;
        hi = _mm256_add_epi32(hi, _mm256_madd_epi16(a, _mm256_set1_epi32(static_cast<int>(wg[0]))));
        lo = _mm256_add_epi32(lo, _mm256_madd_epi16(a, _mm256_set1_epi32(static_cast<int>(wg[1]))));
        hi = _mm256_add_epi32(hi, _mm256_madd_epi16(b, _mm256_set1_epi32(static_cast<int>(wg[2]))));
        lo = _mm256_add_epi32(lo, _mm256_madd_epi16(b, _mm256_set1_epi32(static_cast<int>(wg[3]))));
      }
      __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_slli_epi32(hi, kLoBits), lo), bias);
      s = _mm256_srai_epi32(s, kPrecisionBits);  // floor, as Clip8
      s = _mm256_packs_epi32(s, s);              // to int16 (|s| < 2^10: no saturation)
      s = _mm256_packus_epi16(s, s);             // clamp to 0..255
      const uint32_t q0 = static_cast<uint32_t>(_mm256_extract_epi32(s, 0));
      const uint32_t q1 = static_cast<uint32_t>(_mm256_extract_epi32(s, 4));
      uint8_t* d0 = o0 + 3 * static_cast<size_t>(xx);
      d0[0] = static_cast<uint8_t>(q0);
      d0[1] = static_cast<uint8_t>(q0 >> 8);
      d0[2] = static_cast<uint8_t>(q0 >> 16);
      if (two) {
        uint8_t* d1 = o1 + 3 * static_cast<size_t>(xx);
        d1[0] = static_cast<uint8_t>(q1);
        d1[1] = static_cast<uint8_t>(q1 >> 8);
        d1[2] = static_cast<uint8_t>(q1 >> 16);
      }
    }
  }
}

// Vertical: 32 contiguous bytes of a row at a time, widened to int32 and multiplied by the
// row's weight (broadcast), in four accumulators; the rest of a row scalar.
__attribute__((target("avx2"))) void VerticalAvx2(const Image& src, int row_offset,
                                                  const Coeffs& cv, Image* out) {
  const size_t stride = static_cast<size_t>(src.width) * 3;
  const __m256i bias = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int yy = 0; yy < out->height; ++yy) {
    const int32_t* k = &cv.k[static_cast<size_t>(yy) * cv.ksize];
    const int n = cv.count[yy];
    const uint8_t* base = src.rgb.data() + static_cast<size_t>(cv.first[yy] - row_offset) * stride;
    uint8_t* o = out->rgb.data() + static_cast<size_t>(yy) * stride;
    size_t i = 0;
    for (; i + 32 <= stride; i += 32) {
      __m256i a0 = bias, a1 = bias, a2 = bias, a3 = bias;
      const uint8_t* p = base + i;
      for (int y = 0; y < n; ++y, p += stride) {
        const __m256i kv = _mm256_set1_epi32(k[y]);
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        const __m128i vl = _mm256_castsi256_si128(v), vh = _mm256_extracti128_si256(v, 1);
        a0 = _mm256_add_epi32(a0, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(vl), kv));
        a1 = _mm256_add_epi32(a1,
                              _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(vl, 8)), kv));
        a2 = _mm256_add_epi32(a2, _mm256_mullo_epi32(_mm256_cvtepu8_epi32(vh), kv));
        a3 = _mm256_add_epi32(a3,
                              _mm256_mullo_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(vh, 8)), kv));
      }
      a0 = _mm256_srai_epi32(a0, kPrecisionBits);
      a1 = _mm256_srai_epi32(a1, kPrecisionBits);
      a2 = _mm256_srai_epi32(a2, kPrecisionBits);
      a3 = _mm256_srai_epi32(a3, kPrecisionBits);
      const __m256i b = _mm256_packus_epi16(_mm256_packs_epi32(a0, a1), _mm256_packs_epi32(a2, a3));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm256_permutevar8x32_epi32(b, order));
    }
    for (; i < stride; ++i) {
      int s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < n; ++y) s += base[static_cast<size_t>(y) * stride + i] * k[y];
      o[i] = Clip8(s);
    }
  }
}

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_epi32(), which -Wuninitialized
// reports inside a function compiled for another target (as in backend/cpu/gemm_amx.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
// AVX-512 (BW) horizontal pass: as HorizontalAvx2 with four source rows per register (one
// per 128-bit quarter); the weights, broadcast, serve all four.
__attribute__((target("avx512f,avx512bw"))) void HorizontalAvx512(const Image& in, int y_first,
                                                                  const Coeffs& ch, Image* tmp) {
  const int out_w = tmp->width;
  const HCoeffs hc = SplitCoeffs(ch, out_w);
  const size_t in_stride = static_cast<size_t>(in.width) * 3;
  std::vector<uint8_t> pad[4];
  const uint8_t* end = in.rgb.data() + in.rgb.size();
  auto row_at = [&](int y, int j) {
    const uint8_t* r = in.pixel(0, y);
    if (r + in_stride + 16 <= end) return r;
    pad[j].resize(in_stride + 16);
    std::copy(r, r + in_stride, pad[j].data());
    return static_cast<const uint8_t*>(pad[j].data());
  };
  const __m512i sa = _mm512_broadcast_i32x4(
      _mm_setr_epi8(0, -1, 3, -1, 1, -1, 4, -1, 2, -1, 5, -1, -1, -1, -1, -1));
  const __m512i sb = _mm512_broadcast_i32x4(
      _mm_setr_epi8(6, -1, 9, -1, 7, -1, 10, -1, 8, -1, 11, -1, -1, -1, -1, -1));
  const __m512i bias = _mm512_set1_epi32(1 << (kPrecisionBits - 1));
  for (int y = 0; y < tmp->height; y += 4) {
    const int rows = std::min(4, tmp->height - y);
    const uint8_t* r[4];
    uint8_t* o[4];
    for (int j = 0; j < 4; ++j) {
      const int jj = std::min(j, rows - 1);  // past the end: the last row again, not stored
      r[j] = row_at(y + jj + y_first, j);
      o[j] = tmp->rgb.data() + static_cast<size_t>(y + jj) * out_w * 3;
    }
    for (int xx = 0; xx < out_w; ++xx) {
      const uint32_t* w = &hc.w[static_cast<size_t>(xx) * hc.groups * 4];
      const int steps = (ch.count[xx] + 3) / 4;
      const size_t at = static_cast<size_t>(ch.first[xx]) * 3;
      const uint8_t *p0 = r[0] + at, *p1 = r[1] + at, *p2 = r[2] + at, *p3 = r[3] + at;
      __m512i hi = _mm512_setzero_si512(), lo = _mm512_setzero_si512();
      for (int g = 0; g < steps; ++g) {
        const size_t off = 12 * static_cast<size_t>(g);
        __m512i v =
            _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p0 + off)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1 + off)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p2 + off)), 2);
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p3 + off)), 3);
        const __m512i a = _mm512_shuffle_epi8(v, sa);
        const __m512i b = _mm512_shuffle_epi8(v, sb);
        const uint32_t* wg = w + 4 * g;
        hi = _mm512_add_epi32(hi, _mm512_madd_epi16(a, _mm512_set1_epi32(static_cast<int>(wg[0]))));
        lo = _mm512_add_epi32(lo, _mm512_madd_epi16(a, _mm512_set1_epi32(static_cast<int>(wg[1]))));
        hi = _mm512_add_epi32(hi, _mm512_madd_epi16(b, _mm512_set1_epi32(static_cast<int>(wg[2]))));
        lo = _mm512_add_epi32(lo, _mm512_madd_epi16(b, _mm512_set1_epi32(static_cast<int>(wg[3]))));
      }
      __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(hi, kLoBits), lo), bias);
      s = _mm512_srai_epi32(s, kPrecisionBits);
      s = _mm512_packus_epi16(_mm512_packs_epi32(s, s), _mm512_setzero_si512());
      alignas(64) uint32_t q[16];
      _mm512_store_si512(reinterpret_cast<__m512i*>(q), s);
      for (int j = 0; j < rows; ++j) {
        uint8_t* d = o[j] + 3 * static_cast<size_t>(xx);
        d[0] = static_cast<uint8_t>(q[4 * j]);
        d[1] = static_cast<uint8_t>(q[4 * j] >> 8);
        d[2] = static_cast<uint8_t>(q[4 * j] >> 16);
      }
    }
  }
}

#pragma GCC diagnostic pop

bool HaveAvx2() {
  static const bool have = __builtin_cpu_supports("avx2");
  return have;
}
bool HaveAvx512() {
  static const bool have = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return have;
}
#endif

using HorizontalPass = void (*)(const Image&, int, const Coeffs&, Image*);
using VerticalPass = void (*)(const Image&, int, const Coeffs&, Image*);

Image ResizeWith(const Image& in, int out_w, int out_h, ResampleFilter filter, HorizontalPass hpass,
                 VerticalPass vpass) {
  const Filter f = FilterOf(filter);
  const bool horizontal = out_w != in.width, vertical = out_h != in.height;
  const Coeffs cv = Precompute(in.height, out_h, f);
  // The source rows the vertical pass reads.
  const int y_first = cv.first[0];
  const int y_last = cv.first[out_h - 1] + cv.count[out_h - 1];
  Image tmp;
  const Image* src = &in;
  int row_offset = 0;  // source row of src's row 0
  if (horizontal) {
    const Coeffs ch = Precompute(in.width, out_w, f);
    tmp.width = out_w;
    tmp.height = y_last - y_first;
    tmp.rgb.resize(static_cast<size_t>(tmp.width) * tmp.height * 3);
    hpass(in, y_first, ch, &tmp);
    src = &tmp;
    row_offset = y_first;
  }
  if (!vertical) {
    if (!horizontal) return in;
    return tmp;  // horizontal only: tmp spans every row
  }
  Image out;
  out.width = src->width;
  out.height = out_h;
  out.rgb.resize(static_cast<size_t>(out.width) * out_h * 3);
  vpass(*src, row_offset, cv, &out);
  return out;
}

}  // namespace

bool ResizeWithIsa(const Image& in, int out_w, int out_h, ResampleFilter filter, ResizeIsa isa,
                   Image* out) {
  switch (isa) {
    case ResizeIsa::kScalar:
      *out = ResizeWith(in, out_w, out_h, filter, HorizontalScalar, VerticalScalar);
      return true;
#ifdef SLUICE_RESIZE_AVX2
    case ResizeIsa::kAvx2:
      if (!HaveAvx2()) return false;
      *out = ResizeWith(in, out_w, out_h, filter, HorizontalAvx2, VerticalAvx2);
      return true;
    case ResizeIsa::kAvx512:
      if (!HaveAvx512() || !HaveAvx2()) return false;
      *out = ResizeWith(in, out_w, out_h, filter, HorizontalAvx512, VerticalAvx2);
      return true;
#else
    default:
      return false;
#endif
  }
  return false;
}

Image Resize(const Image& in, int out_w, int out_h, ResampleFilter filter) {
  Image out;
  if (ResizeWithIsa(in, out_w, out_h, filter, ResizeIsa::kAvx512, &out)) return out;
  if (ResizeWithIsa(in, out_w, out_h, filter, ResizeIsa::kAvx2, &out)) return out;
  ResizeWithIsa(in, out_w, out_h, filter, ResizeIsa::kScalar, &out);
  return out;
}

void ShortestEdgeSize(int w, int h, int shortest, int* out_w, int* out_h) {
  const int s = std::min(w, h), l = std::max(w, h);
  const int nl = static_cast<int>(static_cast<double>(shortest) * l / s);
  if (w <= h) {
    *out_w = shortest;
    *out_h = nl;
  } else {
    *out_w = nl;
    *out_h = shortest;
  }
}

Image CenterCrop(const Image& in, int crop_w, int crop_h) {
  crop_w = std::min(crop_w, in.width);
  crop_h = std::min(crop_h, in.height);
  const int top = (in.height - crop_h) / 2, left = (in.width - crop_w) / 2;
  Image out;
  out.width = crop_w;
  out.height = crop_h;
  out.rgb.resize(static_cast<size_t>(crop_w) * crop_h * 3);
  for (int y = 0; y < crop_h; ++y) {
    const uint8_t* s = in.pixel(left, top + y);
    std::copy(s, s + static_cast<size_t>(crop_w) * 3,
              out.rgb.data() + static_cast<size_t>(y) * crop_w * 3);
  }
  return out;
}

}  // namespace sluice::media
