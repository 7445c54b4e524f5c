// EXIF orientation: what transformers' load_image applies (PIL.ImageOps.exif_transpose)
// before an image processor sees the pixels. The TIFF structure of an EXIF block (the
// payload of a JPEG APP1 "Exif\0\0" segment, a PNG eXIf chunk or a WebP EXIF chunk) is
// read for tag 0x0112 of IFD0, with every offset bounds-checked; anything malformed counts
// as "no orientation" (1), as Pillow ignores unreadable EXIF.
#pragma once

#include <string_view>

#include "media/image.h"

namespace sluice::media {

// 1..8, or 1 when absent or unreadable. `tiff` starts at the byte-order mark ("II"/"MM");
// a leading "Exif\0\0" is skipped.
int ExifOrientation(std::string_view tiff);

// Applies an orientation (2..8; 1 is a no-op) as exif_transpose does: 2 mirror, 3 rotate
// 180, 4 flip vertically, 5 transpose, 6 rotate 90 clockwise, 7 transverse, 8 rotate 90
// counter-clockwise.
void ApplyOrientation(Image* img, int orientation);

}  // namespace sluice::media
