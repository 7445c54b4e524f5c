#include "media/resize.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

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

}  // namespace

Image Resize(const Image& in, int out_w, int out_h, ResampleFilter filter) {
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
    for (int y = 0; y < tmp.height; ++y) {
      const uint8_t* row = in.pixel(0, y + y_first);
      uint8_t* out = tmp.rgb.data() + static_cast<size_t>(y) * out_w * 3;
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
  const size_t stride = static_cast<size_t>(src->width) * 3;
  for (int yy = 0; yy < out_h; ++yy) {
    const int32_t* k = &cv.k[static_cast<size_t>(yy) * cv.ksize];
    const uint8_t* base = src->rgb.data() + static_cast<size_t>(cv.first[yy] - row_offset) * stride;
    uint8_t* o = out.rgb.data() + static_cast<size_t>(yy) * stride;
    for (size_t i = 0; i < stride; ++i) {
      int s = 1 << (kPrecisionBits - 1);
      for (int y = 0; y < cv.count[yy]; ++y) s += base[static_cast<size_t>(y) * stride + i] * k[y];
      o[i] = Clip8(s);
    }
  }
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
