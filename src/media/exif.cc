#include "media/exif.h"

#include <cstdint>
#include <utility>
#include <vector>

namespace sluice::media {

int ExifOrientation(std::string_view t) {
  if (t.substr(0, 6) == std::string_view("Exif\0\0", 6)) t.remove_prefix(6);
  if (t.size() < 8) return 1;
  const bool le = t[0] == 'I' && t[1] == 'I';
  if (!le && !(t[0] == 'M' && t[1] == 'M')) return 1;
  auto u16 = [&](size_t at) -> uint32_t {
    const auto a = static_cast<uint8_t>(t[at]), b = static_cast<uint8_t>(t[at + 1]);
    return le ? (a | (b << 8)) : ((a << 8) | b);
  };
  auto u32 = [&](size_t at) -> uint32_t {
    return le ? (u16(at) | (u16(at + 2) << 16)) : ((u16(at) << 16) | u16(at + 2));
  };
  if (u16(2) != 42) return 1;
  const uint32_t ifd = u32(4);
  if (ifd > t.size() - 2) return 1;
  const uint32_t n = u16(ifd);
  for (uint32_t i = 0; i < n; ++i) {
    const size_t e = ifd + 2 + static_cast<size_t>(i) * 12;
    if (e + 12 > t.size()) return 1;
    if (u16(e) != 0x0112) continue;
    const uint32_t type = u16(e + 2), count = u32(e + 4);
    if (type != 3 || count < 1) return 1;  // SHORT
    const uint32_t v = u16(e + 8);
    return v >= 1 && v <= 8 ? static_cast<int>(v) : 1;
  }
  return 1;
}

void ApplyOrientation(Image* img, int o) {
  if (o <= 1 || o > 8) return;
  const int w = img->width, h = img->height;
  const bool swap = o >= 5;
  Image out;
  out.width = swap ? h : w;
  out.height = swap ? w : h;
  out.rgb.resize(img->rgb.size());
  for (int y = 0; y < out.height; ++y) {
    for (int x = 0; x < out.width; ++x) {
      int sx = x, sy = y;  // the source pixel of output (x, y)
      switch (o) {
        case 2:  // mirror
          sx = w - 1 - x;
          break;
        case 3:  // rotate 180
          sx = w - 1 - x;
          sy = h - 1 - y;
          break;
        case 4:  // flip
          sy = h - 1 - y;
          break;
        case 5:  // transpose
          sx = y;
          sy = x;
          break;
        case 6:  // rotate 90 clockwise
          sx = y;
          sy = h - 1 - x;
          break;
        case 7:  // transverse
          sx = w - 1 - y;
          sy = h - 1 - x;
          break;
        default:  // 8: rotate 90 counter-clockwise
          sx = w - 1 - y;
          sy = x;
          break;
      }
      const uint8_t* s = img->pixel(sx, sy);
      uint8_t* d = out.rgb.data() + (static_cast<size_t>(y) * out.width + x) * 3;
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
  *img = std::move(out);
}

}  // namespace sluice::media
