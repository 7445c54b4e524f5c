// Image resampling with Pillow's arithmetic (Image.resize on 8-bit images, reducing_gap
// None), so that pixel values equal what Hugging Face image processors compute, byte for
// byte: separable convolution (a horizontal pass over the source rows the vertical pass
// needs, then the vertical pass), the filter's support widened by the scale factor when
// shrinking (antialiasing), coefficients per output pixel normalised in double precision
// and rounded to 22-bit fixed point, integer accumulation, results rounded and clamped to
// 0..255. Also the other steps of a CLIP-style pre-processing on the same 8-bit image.
//
// Thread-safe: no state.
#pragma once

#include "media/image.h"

namespace sluice::media {

enum class ResampleFilter { kBox, kBilinear, kHamming, kBicubic, kLanczos };

// `in` resized to out_width x out_height (both >= 1). On x86 CPUs with AVX2 (or AVX-512 BW)
// the passes run vectorised, bit for bit the scalar result (the same integer sums in another
// order).
Image Resize(const Image& in, int out_width, int out_height, ResampleFilter filter);

// Tests: one implementation, the portable scalar one (the reference) or a vectorised one;
// false (and *out untouched) where the CPU or the build lacks that instruction set.
enum class ResizeIsa { kScalar, kAvx2, kAvx512 };
bool ResizeWithIsa(const Image& in, int out_width, int out_height, ResampleFilter filter,
                   ResizeIsa isa, Image* out);

// The size an image of w x h gets when its shorter edge is resized to `shortest` and the
// aspect ratio kept: the longer edge is int(shortest * long / short) (truncated), as
// transformers' get_resize_output_image_size(default_to_square=False).
void ShortestEdgeSize(int w, int h, int shortest, int* out_w, int* out_h);

// The crop_w x crop_h window at the centre (top = (h - crop_h) / 2, left = (w - crop_w) / 2,
// rounded down; both crops no larger than the image).
Image CenterCrop(const Image& in, int crop_w, int crop_h);

}  // namespace sluice::media
