// Image decoding and resampling against Pillow (tests/fixtures/images, written by
// tests/golden/generate_images.py with Debian's python3-pil): every fixture decodes to the
// bytes Pillow's convert("RGB") gives, and every resize case gives Pillow's Image.resize
// bytes (CRC-32 of the output), exactly; EXIF orientations 2-8 in JPEG, PNG and WebP give
// what ImageOps.exif_transpose gives (transformers' load_image). Also: format sniffing, header-only
// reads, the pixel limit refusing a decompression bomb before allocating, truncated and corrupt
// files, non-images, and the CLIP-style size arithmetic.
#include <gtest/gtest.h>
#include <simdjson.h>
#include <zlib.h>

#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "media/image.h"
#include "media/preprocess.h"
#include "media/resize.h"

namespace sluice::media {
namespace {

const std::string kDir = std::string(SLUICE_FIXTURES_DIR) + "/images";

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

uint32_t Crc(const std::vector<uint8_t>& v) {
  return static_cast<uint32_t>(crc32(0L, v.data(), static_cast<uInt>(v.size())));
}

ResampleFilter FilterNamed(std::string_view n) {
  return n == "bilinear" ? ResampleFilter::kBilinear : ResampleFilter::kBicubic;
}

TEST(Media, DecodesAndResizesAsPillow) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kDir + "/cases.json").value();
  const simdjson::dom::array images = doc["images"].get_array().value();
  int decoded = 0, resized = 0;
  for (simdjson::dom::element c : images) {
    const std::string name(c["name"].get_string().value());
    SCOPED_TRACE(name);
    const std::string bytes = ReadFile(kDir + "/" + std::string(c["file"].get_string().value()));
    ASSERT_FALSE(bytes.empty());
    auto info = ReadImageInfo(bytes);
    ASSERT_TRUE(info.ok()) << info.status().ToString();
    const int w = static_cast<int>(c["width"].get_int64().value());
    const int h = static_cast<int>(c["height"].get_int64().value());
    int64_t orientation = 1;
    if (c["exif_orientation"].get_int64().get(orientation) != simdjson::SUCCESS) orientation = 1;
    const bool swapped = orientation >= 5;  // the header has the stored size
    EXPECT_EQ(info->width, swapped ? h : w);
    EXPECT_EQ(info->height, swapped ? w : h);
    auto img = DecodeImage(bytes);
    ASSERT_TRUE(img.ok()) << img.status().ToString();
    ASSERT_EQ(img->width, w);
    ASSERT_EQ(img->height, h);
    const std::string want = ReadFile(kDir + "/" + std::string(c["rgb"].get_string().value()));
    ASSERT_EQ(want.size(), img->rgb.size());
    size_t first = want.size();
    int diffs = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (static_cast<uint8_t>(want[i]) != img->rgb[i]) {
        if (first == want.size()) first = i;
        ++diffs;
      }
    }
    EXPECT_EQ(diffs, 0) << "first difference at byte " << first << " (pixel " << first / 3 << ")";
    EXPECT_EQ(Crc(img->rgb), static_cast<uint32_t>(c["crc32"].get_int64().value()));
    ++decoded;
    const simdjson::dom::array resizes = c["resizes"].get_array().value();
    for (simdjson::dom::element r : resizes) {
      const int rw = static_cast<int>(r["width"].get_int64().value());
      const int rh = static_cast<int>(r["height"].get_int64().value());
      const std::string_view filter = r["filter"].get_string().value();
      const Image out = Resize(*img, rw, rh, FilterNamed(filter));
      ASSERT_EQ(out.width, rw);
      ASSERT_EQ(out.height, rh);
      EXPECT_EQ(Crc(out.rgb), static_cast<uint32_t>(r["crc32"].get_int64().value()))
          << filter << " to " << rw << "x" << rh << ", first bytes " << int(out.rgb[0]) << " "
          << int(out.rgb[1]) << " " << int(out.rgb[2]);
      ++resized;
    }
  }
  EXPECT_GE(decoded, 19 + 21);
  EXPECT_GE(resized, 100);
}

TEST(Media, SniffsFormatsAndRefusesNonImages) {
  EXPECT_EQ(SniffFormat(ReadFile(kDir + "/jpeg420.jpg")), ImageFormat::kJpeg);
  EXPECT_EQ(SniffFormat(ReadFile(kDir + "/png_rgb.png")), ImageFormat::kPng);
  EXPECT_EQ(SniffFormat(ReadFile(kDir + "/webp_lossy.webp")), ImageFormat::kWebp);
  for (const std::string& bad : {std::string(), std::string("GIF89a......"),
                                 std::string("<html>not an image</html>"), std::string("RIFF")}) {
    auto r = DecodeImage(bad);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("not an image"), std::string::npos) << r.status().message();
  }
}

TEST(Media, TruncatedAndCorruptFilesFailCleanly) {
  for (const char* f : {"jpeg420.jpg", "jpeg_progressive.jpg", "png_rgb.png", "png_palette.png",
                        "webp_lossy.webp", "webp_lossless.webp"}) {
    SCOPED_TRACE(f);
    const std::string bytes = ReadFile(kDir + "/" + f);
    for (size_t cut : {size_t{20}, bytes.size() / 3, bytes.size() - 9}) {
      auto r = DecodeImage(std::string_view(bytes).substr(0, cut));
      // A JPEG cut inside the entropy-coded data may still decode (libjpeg pads the rest,
      // as Pillow with LOAD_TRUNCATED_IMAGES would not): it must then have the full size.
      if (r.ok()) {
        EXPECT_EQ(SniffFormat(bytes), ImageFormat::kJpeg);
        EXPECT_EQ(r->rgb.size(), static_cast<size_t>(r->width) * r->height * 3);
      } else {
        EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
      }
    }
    std::string corrupt = bytes;
    for (size_t i = 16; i < corrupt.size(); i += 7)
      corrupt[i] = static_cast<char>(corrupt[i] ^ 0x5A);
    auto r = DecodeImage(corrupt);
    if (!r.ok()) {
      EXPECT_NE(r.status().code(), StatusCode::kInternal) << r.status().ToString();
    }
  }
}

TEST(Media, PixelLimitRefusesBeforeDecoding) {
  // A valid PNG header claiming 30000 x 30000 pixels, no image data: refused by size.
  const std::string png = ReadFile(kDir + "/png_rgb.png");
  std::string bomb = png.substr(0, 33);  // signature + IHDR
  auto put32 = [&](size_t at, uint32_t v) {
    for (int i = 0; i < 4; ++i) bomb[at + i] = static_cast<char>((v >> (24 - 8 * i)) & 0xFF);
  };
  put32(16, 30000);
  put32(20, 30000);
  const uint32_t crc =
      static_cast<uint32_t>(crc32(0L, reinterpret_cast<const Bytef*>(bomb.data() + 12), 17));
  put32(29, crc);
  auto info = ReadImageInfo(bomb + png.substr(33));
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(info->width, 30000);
  auto r = DecodeImage(bomb + png.substr(33));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("over the limit"), std::string::npos) << r.status().message();
  DecodeOptions small;
  small.max_pixels = 1000;
  auto j = DecodeImage(ReadFile(kDir + "/jpeg420.jpg"), small);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("123x77"), std::string::npos) << j.status().message();
}

TEST(Media, ShortestEdgeAndCenterCrop) {
  int w = 0, h = 0;
  ShortestEdgeSize(640, 480, 224, &w, &h);
  EXPECT_EQ(w, 298);  // int(224 * 640 / 480) = int(298.67)
  EXPECT_EQ(h, 224);
  ShortestEdgeSize(33, 1000, 224, &w, &h);
  EXPECT_EQ(w, 224);
  EXPECT_EQ(h, 6787);  // int(224 * 1000 / 33) = int(6787.88)
  ShortestEdgeSize(500, 500, 336, &w, &h);
  EXPECT_EQ(w, 336);
  EXPECT_EQ(h, 336);
  Image img;
  img.width = 5;
  img.height = 4;
  for (int i = 0; i < 5 * 4 * 3; ++i) img.rgb.push_back(static_cast<uint8_t>(i));
  const Image c = CenterCrop(img, 2, 2);
  ASSERT_EQ(c.width, 2);
  ASSERT_EQ(c.height, 2);
  EXPECT_EQ(c.pixel(0, 0)[0], img.pixel(1, 1)[0]);  // left (5-2)/2 = 1, top (4-2)/2 = 1
  EXPECT_EQ(c.pixel(1, 1)[2], img.pixel(2, 2)[2]);
}

}  // namespace
}  // namespace sluice::media

namespace sluice::media {
namespace {

std::string ConfigJson(simdjson::dom::element c) {
  const simdjson::dom::array crop = c["crop"].get_array().value();
  std::vector<int64_t> cr;
  for (simdjson::dom::element x : crop) cr.push_back(x.get_int64().value());
  std::ostringstream j;
  j.precision(17);
  j << "{\"size\": {\"shortest_edge\": " << c["shortest_edge"].get_int64().value()
    << "}, \"crop_size\": {\"width\": " << cr[0] << ", \"height\": " << cr[1]
    << "}, \"resample\": " << c["resample"].get_int64().value()
    << ", \"rescale_factor\": " << c["rescale_factor"].get_double().value()
    << ", \"image_mean\": " << simdjson::to_string(c["mean"])
    << ", \"image_std\": " << simdjson::to_string(c["std"])
    << ", \"do_resize\": true, \"do_center_crop\": true, \"do_rescale\": true,"
       " \"do_normalize\": true, \"do_convert_rgb\": true,"
       " \"image_processor_type\": \"CLIPImageProcessor\"}";
  return j.str();
}

TEST(Media, PreprocessAsTheSlowClipProcessor) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc = parser.load(kDir + "/cases.json").value();
  std::map<std::string, ImageProcessorConfig> configs;
  const simdjson::dom::array cfgs = doc["preprocess_configs"].get_array().value();
  for (simdjson::dom::element c : cfgs) {
    auto parsed = ParseImageProcessorConfig(ConfigJson(c));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    configs[std::string(c["name"].get_string().value())] = *parsed;
  }
  const simdjson::dom::array cases = doc["preprocess"].get_array().value();
  int n = 0;
  for (simdjson::dom::element c : cases) {
    const std::string image(c["image"].get_string().value());
    const std::string config(c["config"].get_string().value());
    SCOPED_TRACE(image + " " + config);
    std::string file;
    const simdjson::dom::array images = doc["images"].get_array().value();
    for (simdjson::dom::element e : images) {
      if (e["name"].get_string().value() == image)
        file = std::string(e["file"].get_string().value());
    }
    auto img = DecodeImage(ReadFile(kDir + "/" + file));
    ASSERT_TRUE(img.ok());
    const ImageProcessorConfig& cfg = configs.at(config);
    std::vector<float> px;
    Preprocess(*img, cfg, &px);
    ASSERT_EQ(px.size(), static_cast<size_t>(3 * cfg.out_height() * cfg.out_width()));
    const uint32_t got = static_cast<uint32_t>(
        crc32(0L, reinterpret_cast<const Bytef*>(px.data()), static_cast<uInt>(px.size() * 4)));
    EXPECT_EQ(got, static_cast<uint32_t>(c["crc32"].get_int64().value())) << "px[0] " << px[0];
    ++n;
  }
  EXPECT_EQ(n, 10);
}

// Normalize reads each value from a per-channel table: the same bits as the per-pixel
// arithmetic (float64 rescale rounded to float32, then (x - mean) / std in float32) for every
// byte value, channel and combination of the two steps.
TEST(Media, NormalizeEqualsThePerPixelArithmetic) {
  Image img;
  img.width = 256;
  img.height = 2;
  img.rgb.resize(256 * 2 * 3);
  for (int i = 0; i < 512; ++i) {
    for (int ch = 0; ch < 3; ++ch)
      img.rgb[i * 3 + ch] = static_cast<uint8_t>((i * 7 + ch * 85) & 255);
  }
  for (int mode = 0; mode < 4; ++mode) {
    ImageProcessorConfig c;
    c.do_rescale = (mode & 1) != 0;
    c.do_normalize = (mode & 2) != 0;
    c.rescale_factor = 1.0 / 255.0;
    std::vector<float> got(512 * 3, -1.f);
    Normalize(img, c, got.data());
    for (int i = 0; i < 512; ++i) {
      for (int ch = 0; ch < 3; ++ch) {
        const uint8_t b = img.rgb[i * 3 + ch];
        float want = b;
        if (c.do_rescale) want = static_cast<float>(static_cast<double>(b) * c.rescale_factor);
        if (c.do_normalize) want = (want - c.mean[ch]) / c.std[ch];
        const float v = got[ch * 512 + i];
        ASSERT_EQ(std::memcmp(&v, &want, sizeof(float)), 0)
            << "mode " << mode << " pixel " << i << " channel " << ch;
      }
    }
  }
}

// The patch layout (what a ViT's patch embedding reads) holds Normalize's values, moved:
// row 0 zero, then patch (gy, gx) at row 1 + gy * grid_x + gx as (channel, row, column).
// A non-square image and a patch size that is not a power of two catch swapped axes.
TEST(Media, NormalizePatchesIsNormalizeInPatchOrder) {
  const int p = 7, W = 5 * p, H = 3 * p;
  Image img;
  img.width = W;
  img.height = H;
  img.rgb.resize(static_cast<size_t>(W) * H * 3);
  for (size_t i = 0; i < img.rgb.size(); ++i)
    img.rgb[i] = static_cast<uint8_t>((i * 37 + 11) & 255);
  ImageProcessorConfig c;
  c.do_rescale = c.do_normalize = true;
  c.rescale_factor = 1.0 / 255.0;
  std::vector<float> chw(static_cast<size_t>(3) * W * H);
  Normalize(img, c, chw.data());
  const int K = 3 * p * p, rows = 1 + (W / p) * (H / p);
  std::vector<float> got(static_cast<size_t>(rows) * K, -7.f);
  NormalizePatches(img, c, p, got.data());
  for (int k = 0; k < K; ++k) ASSERT_EQ(got[k], 0.f) << "class row, value " << k;
  for (int gy = 0; gy < H / p; ++gy) {
    for (int gx = 0; gx < W / p; ++gx) {
      for (int ch = 0; ch < 3; ++ch) {
        for (int y = 0; y < p; ++y) {
          for (int x = 0; x < p; ++x) {
            const float want = chw[(static_cast<size_t>(ch) * H + gy * p + y) * W + gx * p + x];
            const float v = got[(1 + static_cast<size_t>(gy) * (W / p) + gx) * K +
                                (static_cast<size_t>(ch) * p + y) * p + x];
            ASSERT_EQ(std::memcmp(&v, &want, sizeof(float)), 0)
                << "patch " << gy << "," << gx << " channel " << ch << " at " << y << "," << x;
          }
        }
      }
    }
  }
}

TEST(Media, ProcessorConfigSpellingsAndRefusals) {
  auto old = ParseImageProcessorConfig(R"({"size": 224, "crop_size": 224, "resample": 3})");
  ASSERT_TRUE(old.ok()) << old.status().ToString();
  EXPECT_EQ(old->shortest_edge, 224);
  EXPECT_EQ(old->crop_width, 224);
  auto exact = ParseImageProcessorConfig(
      R"({"size": {"height": 384, "width": 384}, "do_center_crop": false, "resample": 2})");
  ASSERT_TRUE(exact.ok());
  EXPECT_EQ(exact->shortest_edge, 0);
  EXPECT_EQ(exact->out_height(), 384);
  EXPECT_EQ(exact->resample, ResampleFilter::kBilinear);
  for (const char* bad :
       {R"({"resample": 7})", R"({"do_pad": true})", R"({"size": {"longest_edge": 5}})",
        R"({"image_std": [1, 0, 1]})", R"({"image_mean": [1, 2]})", R"([1])",
        R"({"do_convert_rgb": false})", R"({"size": {}})"}) {
    auto r = ParseImageProcessorConfig(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_NE(r.status().message().find("preprocessor_config.json"), std::string::npos)
          << r.status().message();
    }
  }
  EXPECT_TRUE(ParseImageProcessorConfig(R"({"do_pad": false})").ok());
}

TEST(Media, FastJpegDecodeShrinksInTheDctDomain) {
  const std::string jpg = ReadFile(kDir + "/jpeg444.jpg");  // 81 x 130
  DecodeOptions o;
  o.jpeg_min_short_edge = 20;
  auto small = DecodeImage(jpg, o);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(small->width, 21);  // 2/8: ceil(81 * 2 / 8), ceil(130 * 2 / 8)
  EXPECT_EQ(small->height, 33);
  // Only the SIMD scales (1/8, 1/4, 1/2): 3/8 would keep 30 (31 x 49), 4/8 is taken.
  o.jpeg_min_short_edge = 30;
  auto half = DecodeImage(jpg, o);
  ASSERT_TRUE(half.ok());
  EXPECT_EQ(half->width, 41);
  EXPECT_EQ(half->height, 65);
  o.jpeg_min_short_edge = 80;
  auto full = DecodeImage(jpg, o);
  ASSERT_TRUE(full.ok());
  EXPECT_EQ(full->width, 81);  // 8/8: nothing smaller keeps 80
  const Image exact = *DecodeImage(jpg);
  EXPECT_EQ(full->rgb, exact.rgb);
  // With an EXIF rotation the bound applies to the displayed size.
  DecodeOptions r;
  r.jpeg_min_width = 6;
  auto rot = DecodeImage(ReadFile(kDir + "/exif6_jpg.jpg"), r);  // stored 23 x 14, shown 14 x 23
  ASSERT_TRUE(rot.ok());
  EXPECT_EQ(rot->width, 7);  // 4/8 of the shown width (of the stored height)
  EXPECT_EQ(rot->height, 12);
  // PNG and WebP ignore the bounds.
  auto png = DecodeImage(ReadFile(kDir + "/png_rgb.png"), o);
  ASSERT_TRUE(png.ok());
  EXPECT_EQ(png->width, 97);
}

}  // namespace
}  // namespace sluice::media
