// Images as the image processors of Hugging Face see them: decoded with the semantics of
// Pillow's Image.open(...).convert("RGB") (the reference every image processor starts
// from), as 8-bit RGB, row-major, 3 bytes per pixel.
//
// Decoding is bounded: the header is read first and an image of more than
// DecodeOptions::max_pixels pixels (or wider/taller than max_side) is refused before any
// pixel memory is allocated, so a small file that claims a huge size (a decompression bomb)
// costs nothing. Every failure is an InvalidArgument (or Unsupported) naming the problem.
//
// Thread-safe: the functions keep no state.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sluice/status.h"

namespace sluice::media {

struct Image {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3
  const uint8_t* pixel(int x, int y) const {
    return rgb.data() + (static_cast<size_t>(y) * width + x) * 3;
  }
};

enum class ImageFormat { kUnknown, kJpeg, kPng, kWebp };
const char* ImageFormatName(ImageFormat f);
// From the first bytes (magic numbers), not from names or content types.
ImageFormat SniffFormat(std::string_view bytes);

struct ImageInfo {
  ImageFormat format = ImageFormat::kUnknown;
  int width = 0;
  int height = 0;
};
// The format and size from the header only.
StatusOr<ImageInfo> ReadImageInfo(std::string_view bytes);

struct DecodeOptions {
  int64_t max_pixels = 40'000'000;  // width * height
  int max_side = 20'000;
  // Rotate/mirror by the EXIF orientation (JPEG APP1, PNG eXIf, WebP EXIF), as
  // transformers' load_image does (PIL.ImageOps.exif_transpose).
  bool exif_orientation = true;
  // JPEG only, "fast" decoding: when any is > 0, the image is decoded scaled by the smallest
  // M/8 (libjpeg-turbo's DCT-domain scaling, M = 1, 2, 4 or 8: its SIMD IDCTs) that keeps the
  // shorter edge >= jpeg_min_short_edge and the width/height >= jpeg_min_width/height (EXIF
  // orientation taken into account). Not Pillow's result: the resize that follows starts from a
  // different image.
  int jpeg_min_short_edge = 0, jpeg_min_width = 0, jpeg_min_height = 0;
  // Where "fast" decoding picks 1/8, baseline JPEGs go through sluice's own 1/8 decoder
  // (media/jpeg_dc.h: libjpeg-turbo's 1/8 output to the bit, much less Huffman work); the
  // files it does not handle through libjpeg-turbo. False: libjpeg-turbo always (tests and
  // benchmarks compare the two).
  bool jpeg_own_eighth_decoder = true;
};

// Pillow semantics per format:
//   JPEG: libjpeg's default decode (accurate integer IDCT, fancy upsampling); grayscale
//     replicated to RGB; CMYK/YCCK refused (Unsupported).
//   PNG: 16-bit samples keep their high byte (16-bit grayscale is clamped at 255, as
//     Pillow's mode "I" converts), palettes expanded (transparency ignored),
//     grayscale replicated, alpha dropped (not composited), interlacing undone, gamma
//     ignored.
//   WebP: libwebp's default decode, alpha dropped.
StatusOr<Image> DecodeImage(std::string_view bytes, const DecodeOptions& options = {});

}  // namespace sluice::media
