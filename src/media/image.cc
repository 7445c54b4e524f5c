#include "media/image.h"

#include <jpeglib.h>
#include <png.h>
#include <webp/decode.h>
#include <webp/demux.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include "media/exif.h"
#include "media/jpeg_dc.h"

namespace sluice::media {

namespace {

bool StartsWith(std::string_view b, std::string_view magic) {
  return b.size() >= magic.size() && b.substr(0, magic.size()) == magic;
}

Status CheckSize(int w, int h, const DecodeOptions& limits, const char* what) {
  if (w <= 0 || h <= 0) {
    return InvalidArgument(std::string(what) + " image has no pixels (" + std::to_string(w) + "x" +
                           std::to_string(h) + ")");
  }
  if (w > limits.max_side || h > limits.max_side ||
      static_cast<int64_t>(w) * h > limits.max_pixels) {
    return InvalidArgument(std::string(what) + " image of " + std::to_string(w) + "x" +
                           std::to_string(h) + " pixels is over the limit (" +
                           std::to_string(limits.max_pixels) + " pixels, " +
                           std::to_string(limits.max_side) + " a side)");
  }
  return Status::Ok();
}

// ---- JPEG (libjpeg(-turbo)): errors longjmp out of the library into Decode. ----

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}
void JpegSilence(j_common_ptr, int) {}

// Everything that must survive a longjmp lives outside the setjmp frame's locals.
struct JpegState {
  jpeg_decompress_struct cinfo;
  JpegError err;
  bool created = false;
  ~JpegState() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

Status DecodeJpeg(std::string_view bytes, const DecodeOptions& limits, bool header_only,
                  ImageInfo* info, Image* out) {
  JpegState st;
  st.cinfo.err = jpeg_std_error(&st.err.mgr);
  st.err.mgr.error_exit = JpegErrorExit;
  st.err.mgr.emit_message = JpegSilence;
  std::vector<uint8_t> row;
  if (setjmp(st.err.jump) != 0) {
    return InvalidArgument(std::string("JPEG image is corrupt or truncated: ") + st.err.message);
  }
  jpeg_create_decompress(&st.cinfo);
  st.created = true;
  jpeg_mem_src(&st.cinfo, reinterpret_cast<const unsigned char*>(bytes.data()),
               static_cast<unsigned long>(bytes.size()));
  jpeg_save_markers(&st.cinfo, JPEG_APP0 + 1, 0xFFFF);
  jpeg_read_header(&st.cinfo, TRUE);
  info->format = ImageFormat::kJpeg;
  info->width = static_cast<int>(st.cinfo.image_width);
  info->height = static_cast<int>(st.cinfo.image_height);
  if (header_only) return Status::Ok();
  RETURN_IF_ERROR(CheckSize(info->width, info->height, limits, "JPEG"));
  const J_COLOR_SPACE cs = st.cinfo.jpeg_color_space;
  const bool gray = cs == JCS_GRAYSCALE;
  if (cs == JCS_CMYK || cs == JCS_YCCK) {
    return Unsupported("CMYK JPEG images are not supported (convert to RGB)");
  }
  st.cinfo.out_color_space = gray ? JCS_GRAYSCALE : JCS_RGB;
  // The saved markers live in the image pool, which finishing the decode frees.
  int orientation = 1;
  for (jpeg_saved_marker_ptr m = st.cinfo.marker_list; m != nullptr; m = m->next) {
    const std::string_view d(reinterpret_cast<const char*>(m->data), m->data_length);
    if (m->marker == JPEG_APP0 + 1 && d.substr(0, 6) == std::string_view("Exif\0\0", 6)) {
      orientation = ExifOrientation(d);
      break;  // the first EXIF segment, as Pillow
    }
  }
  if (limits.jpeg_min_short_edge > 0 || limits.jpeg_min_width > 0 || limits.jpeg_min_height > 0) {
    // The displayed width/height (after the orientation) must stay >= the bounds.
    const bool swap = limits.exif_orientation && orientation >= 5;
    const int64_t w0 = swap ? info->height : info->width, h0 = swap ? info->width : info->height;
    auto scaled = [](int64_t v, int m) { return (v * m + 7) / 8; };  // libjpeg rounds up
    // Only 1/8, 1/4 and 1/2: libjpeg-turbo's SIMD reduced IDCTs (the other M/8 run scalar,
    // slower than the full SIMD IDCT plus the larger resize).
    int m = 8;
    for (int cand : {1, 2, 4}) {
      const int64_t w = scaled(w0, cand), h = scaled(h0, cand);
      if (std::min(w, h) >= limits.jpeg_min_short_edge && w >= limits.jpeg_min_width &&
          h >= limits.jpeg_min_height) {
        m = cand;
        break;
      }
    }
    st.cinfo.scale_num = static_cast<unsigned>(m);
    st.cinfo.scale_denom = 8;
    // At 1/8 our own decoder, where it handles the file (same pixels); libjpeg-turbo otherwise.
    if (m == 1 && limits.jpeg_own_eighth_decoder && !st.cinfo.progressive_mode &&
        !st.cinfo.arith_code && st.cinfo.data_precision == 8 && (gray || cs == JCS_YCbCr) &&
        DecodeJpegEighth(bytes, limits, out)) {
      if (limits.exif_orientation) ApplyOrientation(out, orientation);
      return Status::Ok();
    }
  }
  jpeg_start_decompress(&st.cinfo);
  const int w = static_cast<int>(st.cinfo.output_width),
            h = static_cast<int>(st.cinfo.output_height);
  out->width = w;
  out->height = h;
  out->rgb.resize(static_cast<size_t>(w) * h * 3);
  if (gray) row.resize(static_cast<size_t>(w));
  while (st.cinfo.output_scanline < st.cinfo.output_height) {
    const int y = static_cast<int>(st.cinfo.output_scanline);
    uint8_t* dst = out->rgb.data() + static_cast<size_t>(y) * w * 3;
    JSAMPROW r = gray ? row.data() : dst;
    jpeg_read_scanlines(&st.cinfo, &r, 1);
    if (gray) {
      for (int x = 0; x < w; ++x) dst[3 * x] = dst[3 * x + 1] = dst[3 * x + 2] = row[x];
    }
  }
  jpeg_finish_decompress(&st.cinfo);
  if (limits.exif_orientation) ApplyOrientation(out, orientation);
  return Status::Ok();
}

// ---- PNG (libpng): errors longjmp out of the library. ----

struct PngReader {
  std::string_view data;
  size_t pos = 0;
};
void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* r = static_cast<PngReader*>(png_get_io_ptr(png));
  if (r->pos + n > r->data.size()) png_error(png, "unexpected end of data");
  std::memcpy(out, r->data.data() + r->pos, n);
  r->pos += n;
}
struct PngState {
  png_structp png = nullptr;
  png_infop info = nullptr;
  char message[256] = {0};
  std::vector<uint8_t> buffer;  // 16-bit grayscale rows
  ~PngState() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};
void PngErrorFn(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(st->message, sizeof(st->message), "%s", msg);
  png_longjmp(png, 1);
}
void PngWarnFn(png_structp, png_const_charp) {}

// The eXIf chunk's orientation (before or after the image data; read_end collects the
// latter), 1 without one.
int PngOrientation(const PngState& st) {
  png_uint_32 n = 0;
  png_bytep exif = nullptr;
  if (png_get_eXIf_1(st.png, st.info, &n, &exif) == 0 || exif == nullptr) return 1;
  return ExifOrientation(std::string_view(reinterpret_cast<const char*>(exif), n));
}

Status DecodePng(std::string_view bytes, const DecodeOptions& limits, bool header_only,
                 ImageInfo* info, Image* out) {
  PngState st;
  st.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, PngErrorFn, PngWarnFn);
  if (st.png == nullptr) return Internal("libpng: cannot create a reader");
  st.info = png_create_info_struct(st.png);
  if (st.info == nullptr) return Internal("libpng: cannot create an info struct");
  PngReader reader{bytes, 0};
  std::vector<png_bytep> rows;
  if (setjmp(png_jmpbuf(st.png)) != 0) {
    return InvalidArgument(std::string("PNG image is corrupt or truncated: ") + st.message);
  }
  png_set_read_fn(st.png, &reader, PngRead);
  png_read_info(st.png, st.info);  // no pixel memory yet: the size is checked below
  png_uint_32 w = 0, h = 0;
  int depth = 0, color = 0, interlace = 0;
  png_get_IHDR(st.png, st.info, &w, &h, &depth, &color, &interlace, nullptr, nullptr);
  info->format = ImageFormat::kPng;
  info->width = static_cast<int>(w);
  info->height = static_cast<int>(h);
  if (header_only) return Status::Ok();
  RETURN_IF_ERROR(CheckSize(info->width, info->height, limits, "PNG"));
  out->width = static_cast<int>(w);
  out->height = static_cast<int>(h);
  out->rgb.resize(static_cast<size_t>(w) * h * 3);
  if (color == PNG_COLOR_TYPE_GRAY && depth == 16) {
    // Pillow opens these as mode "I" and convert("RGB") clamps at 255 (no high byte).
    png_set_interlace_handling(st.png);
    png_read_update_info(st.png, st.info);
    std::vector<uint8_t>& g16 = st.buffer;
    g16.resize(static_cast<size_t>(w) * h * 2);
    rows.resize(h);
    for (png_uint_32 y = 0; y < h; ++y) rows[y] = g16.data() + static_cast<size_t>(y) * w * 2;
    png_read_image(st.png, rows.data());
    png_read_end(st.png, st.info);
    for (size_t i = 0; i < static_cast<size_t>(w) * h; ++i) {
      const unsigned v = (static_cast<unsigned>(g16[2 * i]) << 8) | g16[2 * i + 1];
      out->rgb[3 * i] = out->rgb[3 * i + 1] = out->rgb[3 * i + 2] =
          static_cast<uint8_t>(v > 255 ? 255 : v);
    }
    if (limits.exif_orientation) ApplyOrientation(out, PngOrientation(st));
    return Status::Ok();
  }
  if (depth == 16) png_set_strip_16(st.png);  // the high byte, as Pillow's RGB;16B
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(st.png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(st.png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(st.png);
  }
  if (color & PNG_COLOR_MASK_ALPHA) png_set_strip_alpha(st.png);
  png_set_interlace_handling(st.png);
  png_read_update_info(st.png, st.info);
  if (png_get_rowbytes(st.png, st.info) != static_cast<size_t>(w) * 3) {
    return Unsupported("PNG pixel layout not supported (color type " + std::to_string(color) +
                       ", bit depth " + std::to_string(depth) + ")");
  }
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = out->rgb.data() + static_cast<size_t>(y) * w * 3;
  png_read_image(st.png, rows.data());
  png_read_end(st.png, st.info);
  if (limits.exif_orientation) ApplyOrientation(out, PngOrientation(st));
  return Status::Ok();
}

// ---- WebP (libwebp). ----

Status DecodeWebp(std::string_view bytes, const DecodeOptions& limits, bool header_only,
                  ImageInfo* info, Image* out) {
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data());
  WebPBitstreamFeatures f;
  if (WebPGetFeatures(data, bytes.size(), &f) != VP8_STATUS_OK) {
    return InvalidArgument("WebP image is corrupt or truncated (no valid header)");
  }
  info->format = ImageFormat::kWebp;
  info->width = f.width;
  info->height = f.height;
  if (header_only) return Status::Ok();
  if (f.has_animation) return Unsupported("animated WebP images are not supported");
  RETURN_IF_ERROR(CheckSize(f.width, f.height, limits, "WebP"));
  out->width = f.width;
  out->height = f.height;
  out->rgb.resize(static_cast<size_t>(f.width) * f.height * 3);
  if (WebPDecodeRGBInto(data, bytes.size(), out->rgb.data(), out->rgb.size(), f.width * 3) ==
      nullptr) {
    out->rgb.clear();
    return InvalidArgument("WebP image is corrupt or truncated");
  }
  if (limits.exif_orientation) {
    WebPData wd{data, bytes.size()};
    WebPDemuxer* demux = WebPDemux(&wd);
    if (demux != nullptr) {
      WebPChunkIterator it;
      if (WebPDemuxGetChunk(demux, "EXIF", 1, &it)) {
        ApplyOrientation(out, ExifOrientation(std::string_view(
                                  reinterpret_cast<const char*>(it.chunk.bytes), it.chunk.size)));
        WebPDemuxReleaseChunkIterator(&it);
      }
      WebPDemuxDelete(demux);
    }
  }
  return Status::Ok();
}

Status Decode(std::string_view bytes, const DecodeOptions& limits, bool header_only,
              ImageInfo* info, Image* out) {
  switch (SniffFormat(bytes)) {
    case ImageFormat::kJpeg:
      return DecodeJpeg(bytes, limits, header_only, info, out);
    case ImageFormat::kPng:
      return DecodePng(bytes, limits, header_only, info, out);
    case ImageFormat::kWebp:
      return DecodeWebp(bytes, limits, header_only, info, out);
    case ImageFormat::kUnknown:
      break;
  }
  return InvalidArgument(bytes.empty() ? "not an image: no data"
                                       : "not an image: the data is not JPEG, PNG or WebP");
}

}  // namespace

const char* ImageFormatName(ImageFormat f) {
  switch (f) {
    case ImageFormat::kJpeg:
      return "jpeg";
    case ImageFormat::kPng:
      return "png";
    case ImageFormat::kWebp:
      return "webp";
    case ImageFormat::kUnknown:
      break;
  }
  return "unknown";
}

ImageFormat SniffFormat(std::string_view b) {
  if (StartsWith(b, "\xFF\xD8\xFF")) return ImageFormat::kJpeg;
  if (StartsWith(b, "\x89PNG\r\n\x1A\n")) return ImageFormat::kPng;
  if (b.size() >= 12 && StartsWith(b, "RIFF") && b.substr(8, 4) == "WEBP") {
    return ImageFormat::kWebp;
  }
  return ImageFormat::kUnknown;
}

StatusOr<ImageInfo> ReadImageInfo(std::string_view bytes) {
  ImageInfo info;
  Image unused;
  RETURN_IF_ERROR(Decode(bytes, DecodeOptions{}, true, &info, &unused));
  return info;
}

StatusOr<Image> DecodeImage(std::string_view bytes, const DecodeOptions& limits) {
  ImageInfo info;
  Image img;
  RETURN_IF_ERROR(Decode(bytes, limits, false, &info, &img));
  return img;
}

}  // namespace sluice::media
