// A CLIP-style image processor (Hugging Face's CLIPImageProcessor and the processors that
// share its steps: SigLIP, ViT, ...), configured from the model's preprocessor_config.json:
// resize (shortest edge, or an exact height x width) with the configured PIL filter, center
// crop, rescale and normalise, into float32 pixel values [3, height, width] (channels first).
//
// The arithmetic follows transformers' slow (PIL) processor: the resize and crop on the
// 8-bit image (media/resize.h), then rescale as float64 multiplication rounded to float32,
// then (x - mean) / std in float32.
#pragma once

#include <array>
#include <string_view>
#include <vector>

#include "media/image.h"
#include "media/resize.h"
#include "sluice/status.h"

namespace sluice::media {

struct ImageProcessorConfig {
  bool do_resize = true;
  int shortest_edge = 224;  // > 0: resize the shorter edge to this; else resize_height/width
  int resize_height = 0, resize_width = 0;
  ResampleFilter resample = ResampleFilter::kBicubic;
  bool do_center_crop = true;
  int crop_height = 224, crop_width = 224;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<float, 3> mean = {0.48145466f, 0.4578275f, 0.40821073f};  // OpenAI CLIP's
  std::array<float, 3> std = {0.26862954f, 0.26130258f, 0.27577711f};
  // The output's size (after the crop, or the resize without one).
  int out_height() const;
  int out_width() const;
};

// preprocessor_config.json (either size spelling: {"shortest_edge": n} or {"height",
// "width"} or a bare number; crop_size likewise; resample as PIL's integer constants).
// Fields that would change the result and are not implemented (do_pad, do_flip_channel_order,
// resample values other than PIL's filters, ...) are refused by name.
StatusOr<ImageProcessorConfig> ParseImageProcessorConfig(std::string_view json);

// The image after resize and crop (8-bit), as the processor computes before rescaling.
Image ResizeAndCrop(const Image& in, const ImageProcessorConfig& c);
// Pixel values [3, out_height, out_width], channels first, into `out` (resized as needed).
void Preprocess(const Image& in, const ImageProcessorConfig& c, std::vector<float>* out);
// The rescale and normalise steps of Preprocess on an image ResizeAndCrop made: its pixel
// values [3, height, width], channels first, into out[0, 3 * width * height).
void Normalize(const Image& img, const ImageProcessorConfig& c, float* out);
// Normalize's values in the layout a ViT's patch embedding reads (im2col): a zero row (the
// class token's), then one row per patch of `patch` x `patch` pixels in raster order, each
// row (channel, row, column) — 1 + (width / patch) * (height / patch) rows of
// 3 * patch * patch values into `out`. Width and height must be multiples of `patch`.
void NormalizePatches(const Image& img, const ImageProcessorConfig& c, int patch, float* out);

// "fast" mode: lets the JPEG decoder shrink in the DCT domain as far as this processor's
// resize allows without upsampling (DecodeOptions::jpeg_min_*), leaving the rest of the
// options alone. Exact mode decodes at full size.
void SetFastDecodeBounds(const ImageProcessorConfig& c, DecodeOptions* options);

}  // namespace sluice::media
