// The vectorised Resize (AVX2, AVX-512) against the scalar reference, byte for byte: random and
// extreme (0/255 checkerboard: the clamping of negative lobes) images of many sizes, 1xN and Nx1,
// upscales and downscales from 1.01x to 20x, every filter, and the CLIP case of a 12 MP photo
// (4032x3024 -> 448x336, bicubic), for each instruction set the CPU has (AVX2, AVX-512 BW).
// Skipped on CPUs without AVX2.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "media/image.h"
#include "media/resize.h"

namespace sluice::media {
namespace {

Image Random(int w, int h, uint32_t seed, bool extreme) {
  Image img;
  img.width = w;
  img.height = h;
  img.rgb.resize(static_cast<size_t>(w) * h * 3);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < img.rgb.size(); ++i) {
    const uint32_t r = rng();
    img.rgb[i] = extreme ? ((i / 3 + i / (3 * static_cast<size_t>(w))) % 2 ? 255 : (r & 1) * 3)
                         : static_cast<uint8_t>(r >> 24);
  }
  return img;
}

constexpr ResampleFilter kFilters[] = {ResampleFilter::kBox, ResampleFilter::kBilinear,
                                       ResampleFilter::kHamming, ResampleFilter::kBicubic,
                                       ResampleFilter::kLanczos};

bool Supported(ResizeIsa isa) {
  Image out;
  Image in;
  in.width = in.height = 1;
  in.rgb = {1, 2, 3};
  return ResizeWithIsa(in, 2, 2, ResampleFilter::kBox, isa, &out);
}

// The vectorised instruction sets this CPU has.
std::vector<ResizeIsa> Isas() {
  std::vector<ResizeIsa> v;
  for (ResizeIsa isa : {ResizeIsa::kAvx2, ResizeIsa::kAvx512})
    if (Supported(isa)) v.push_back(isa);
  return v;
}

double Ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

void ExpectSame(const Image& in, int w, int h, ResampleFilter f, bool timed = false) {
  SCOPED_TRACE(std::to_string(in.width) + "x" + std::to_string(in.height) + " -> " +
               std::to_string(w) + "x" + std::to_string(h) + " filter " +
               std::to_string(static_cast<int>(f)));
  Image want;
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(ResizeWithIsa(in, w, h, f, ResizeIsa::kScalar, &want));
  if (timed) std::printf("scalar: %.1f ms\n", Ms(t0));
  for (ResizeIsa isa : Isas()) {
    SCOPED_TRACE(isa == ResizeIsa::kAvx2 ? "avx2" : "avx512");
    Image got;
    t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(ResizeWithIsa(in, w, h, f, isa, &got));
    if (timed) std::printf("%s: %.1f ms\n", isa == ResizeIsa::kAvx2 ? "avx2" : "avx512", Ms(t0));
    ASSERT_EQ(got.width, w);
    ASSERT_EQ(got.height, h);
    ASSERT_EQ(got.rgb.size(), want.rgb.size());
    size_t diffs = 0, first = want.rgb.size();
    for (size_t i = 0; i < want.rgb.size(); ++i) {
      if (got.rgb[i] != want.rgb[i]) {
        if (diffs++ == 0) first = i;
      }
    }
    EXPECT_EQ(diffs, 0u) << "first difference at byte " << first;
  }
  // Resize takes one of them.
  EXPECT_EQ(Resize(in, w, h, f).rgb, want.rgb);
}

TEST(ResizeSimd, EqualsScalarOnManySizes) {
  if (Isas().empty()) GTEST_SKIP() << "no AVX2";
  struct Size {
    int w, h, ow, oh;
  };
  std::vector<Size> sizes = {
      {1, 1, 1, 1},       {1, 1, 7, 5},         {1, 37, 1, 5},        {37, 1, 5, 1},
      {1, 50, 3, 50},     {50, 1, 50, 3},       {2, 3, 5, 7},         {3, 2, 1, 1},
      {5, 5, 5, 5},       {7, 9, 13, 11},       {17, 13, 16, 12},     {31, 33, 64, 8},
      {33, 31, 8, 64},    {101, 99, 100, 98},   {100, 100, 99, 99},   {97, 61, 5, 3},
      {640, 480, 32, 24}, {257, 129, 256, 128}, {203, 151, 448, 336}, {64, 64, 1, 1},
      {300, 7, 299, 7},   {7, 300, 7, 299},
  };
  // Downscales by 1.01x to 20x and upscales, on odd sizes.
  for (double f : {1.01, 1.1, 1.5, 2.0, 2.7, 3.0, 4.4, 7.3, 9.0, 12.5, 20.0, 0.9, 0.5, 0.31}) {
    const int w = 401, h = 233;
    sizes.push_back(
        {w, h, std::max(1, static_cast<int>(w / f)), std::max(1, static_cast<int>(h / f))});
    sizes.push_back(
        {h, w, std::max(1, static_cast<int>(h / f)), std::max(1, static_cast<int>(w / f))});
  }
  uint32_t seed = 7;
  for (const Size& s : sizes) {
    for (bool extreme : {false, true}) {
      const Image in = Random(s.w, s.h, seed++, extreme);
      for (ResampleFilter f : kFilters) {
        ExpectSame(in, s.ow, s.oh, f);
        ExpectSame(in, s.ow, s.h, f);  // horizontal only
        ExpectSame(in, s.w, s.oh, f);  // vertical only
      }
    }
  }
}

TEST(ResizeSimd, EqualsScalarOnAPhotoToClipSize) {
  if (Isas().empty()) GTEST_SKIP() << "no AVX2";
  // A smooth gradient with noise, as a photo, and pure noise.
  Image photo = Random(4032, 3024, 99, false);
  for (int y = 0; y < photo.height; ++y)
    for (int x = 0; x < photo.width; ++x)
      for (int c = 0; c < 3; ++c) {
        uint8_t& v = photo.rgb[(static_cast<size_t>(y) * photo.width + x) * 3 + c];
        v = static_cast<uint8_t>((x / 16 + y / 12 + 40 * c + (v & 15)) & 255);
      }
  ExpectSame(photo, 448, 336, ResampleFilter::kBicubic, /*timed=*/true);
  ExpectSame(Random(4032, 3024, 5, false), 448, 336, ResampleFilter::kBicubic);
  ExpectSame(Random(3024, 4032, 6, true), 336, 448, ResampleFilter::kLanczos);
}

}  // namespace
}  // namespace sluice::media
