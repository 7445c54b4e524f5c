#include "media/preprocess.h"

#include <simdjson.h>

#include <algorithm>
#include <string>

namespace sluice::media {

namespace {

// A size field: a number, {"shortest_edge": n}, or {"height": h, "width": w}.
Status ReadSize(simdjson::dom::element e, const char* field, int* shortest, int* h, int* w) {
  int64_t n = 0;
  if (e.get_int64().get(n) == simdjson::SUCCESS) {
    if (shortest != nullptr) {
      *shortest = static_cast<int>(n);
    } else {
      *h = *w = static_cast<int>(n);
    }
    return Status::Ok();
  }
  simdjson::dom::object o;
  if (e.get_object().get(o) != simdjson::SUCCESS) {
    return InvalidArgument(std::string("preprocessor_config.json: ") + field +
                           " must be a number or an object");
  }
  for (auto [k, v] : o) {
    int64_t x = 0;
    if (v.get_int64().get(x) != simdjson::SUCCESS || x <= 0) {
      return InvalidArgument(std::string("preprocessor_config.json: ") + field + "." +
                             std::string(k) + " must be a positive integer");
    }
    if (k == "shortest_edge" && shortest != nullptr) {
      *shortest = static_cast<int>(x);
    } else if (k == "height") {
      *h = static_cast<int>(x);
    } else if (k == "width") {
      *w = static_cast<int>(x);
    } else {
      return Unsupported(std::string("preprocessor_config.json: ") + field + "." + std::string(k) +
                         " is not supported");
    }
  }
  return Status::Ok();
}

Status ReadTriple(simdjson::dom::element e, const char* field, std::array<float, 3>* out) {
  simdjson::dom::array a;
  if (e.get_array().get(a) != simdjson::SUCCESS || a.size() != 3) {
    return InvalidArgument(std::string("preprocessor_config.json: ") + field +
                           " must be a list of 3 numbers");
  }
  size_t i = 0;
  for (simdjson::dom::element x : a) {
    double d = 0;
    if (x.get_double().get(d) != simdjson::SUCCESS) {
      return InvalidArgument(std::string("preprocessor_config.json: ") + field +
                             " must be a list of 3 numbers");
    }
    (*out)[i++] = static_cast<float>(d);
  }
  return Status::Ok();
}

}  // namespace

int ImageProcessorConfig::out_height() const {
  return do_center_crop ? crop_height : (shortest_edge > 0 ? 0 : resize_height);
}
int ImageProcessorConfig::out_width() const {
  return do_center_crop ? crop_width : (shortest_edge > 0 ? 0 : resize_width);
}

StatusOr<ImageProcessorConfig> ParseImageProcessorConfig(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::dom::object o;
  if (parser.parse(json.data(), json.size()).get_object().get(o) != simdjson::SUCCESS) {
    return InvalidArgument("preprocessor_config.json is not a JSON object");
  }
  ImageProcessorConfig c;
  for (auto [k, v] : o) {
    bool b = false;
    if (k == "do_resize" || k == "do_center_crop" || k == "do_rescale" || k == "do_normalize" ||
        k == "do_convert_rgb") {
      if (v.get_bool().get(b) != simdjson::SUCCESS) {
        return InvalidArgument("preprocessor_config.json: " + std::string(k) +
                               " must be a boolean");
      }
      if (k == "do_resize") c.do_resize = b;
      if (k == "do_center_crop") c.do_center_crop = b;
      if (k == "do_rescale") c.do_rescale = b;
      if (k == "do_normalize") c.do_normalize = b;
      if (k == "do_convert_rgb" && !b) {
        return Unsupported("preprocessor_config.json: do_convert_rgb false is not supported");
      }
    } else if (k == "size") {
      c.shortest_edge = 0;
      RETURN_IF_ERROR(ReadSize(v, "size", &c.shortest_edge, &c.resize_height, &c.resize_width));
    } else if (k == "crop_size") {
      RETURN_IF_ERROR(ReadSize(v, "crop_size", nullptr, &c.crop_height, &c.crop_width));
    } else if (k == "resample") {
      int64_t r = 0;
      if (v.get_int64().get(r) != simdjson::SUCCESS) {
        return InvalidArgument("preprocessor_config.json: resample must be an integer");
      }
      switch (r) {  // PIL's constants
        case 1:
          c.resample = ResampleFilter::kLanczos;
          break;
        case 2:
          c.resample = ResampleFilter::kBilinear;
          break;
        case 3:
          c.resample = ResampleFilter::kBicubic;
          break;
        case 4:
          c.resample = ResampleFilter::kBox;
          break;
        case 5:
          c.resample = ResampleFilter::kHamming;
          break;
        default:
          return Unsupported("preprocessor_config.json: resample " + std::to_string(r) +
                             " is not supported (1-5: LANCZOS, BILINEAR, BICUBIC, BOX, HAMMING)");
      }
    } else if (k == "rescale_factor") {
      if (v.get_double().get(c.rescale_factor) != simdjson::SUCCESS) {
        return InvalidArgument("preprocessor_config.json: rescale_factor must be a number");
      }
    } else if (k == "image_mean") {
      RETURN_IF_ERROR(ReadTriple(v, "image_mean", &c.mean));
    } else if (k == "image_std") {
      RETURN_IF_ERROR(ReadTriple(v, "image_std", &c.std));
    } else if (k == "do_pad" || k == "do_flip_channel_order" || k == "do_reduce_labels" ||
               k == "pad_size" || k == "do_random_crop") {
      if (v.get_bool().get(b) == simdjson::SUCCESS && !b) continue;  // off: nothing to do
      return Unsupported("preprocessor_config.json: " + std::string(k) + " is not supported");
    }
    // Other keys (image_processor_type, processor_class, feature_extractor_type, ...) name the
    // processor and do not change the arithmetic.
  }
  if (c.do_resize && c.shortest_edge <= 0 && (c.resize_height <= 0 || c.resize_width <= 0)) {
    return InvalidArgument(
        "preprocessor_config.json: size needs shortest_edge or height and width");
  }
  for (float s : c.std) {
    if (!(s > 0.f)) return InvalidArgument("preprocessor_config.json: image_std must be positive");
  }
  return c;
}

Image ResizeAndCrop(const Image& in, const ImageProcessorConfig& c) {
  Image img;
  const Image* cur = &in;
  if (c.do_resize) {
    int w = c.resize_width, h = c.resize_height;
    if (c.shortest_edge > 0) ShortestEdgeSize(in.width, in.height, c.shortest_edge, &w, &h);
    img = Resize(in, w, h, c.resample);
    cur = &img;
  }
  if (c.do_center_crop) return CenterCrop(*cur, c.crop_width, c.crop_height);
  return cur == &in ? in : img;
}

namespace {

// A value depends only on the byte and the channel: one table of 256 per channel, computed
// with the per-pixel arithmetic (float64 rescale rounded to float32, then float32 (x - mean)
// / std), so the output is the same to the bit at a table look-up per value.
void NormalizeTables(const ImageProcessorConfig& c, float (*table)[256]) {
  for (int ch = 0; ch < 3; ++ch) {
    for (int b = 0; b < 256; ++b) {
      float v = static_cast<float>(b);
      if (c.do_rescale) v = static_cast<float>(static_cast<double>(b) * c.rescale_factor);
      if (c.do_normalize) v = (v - c.mean[ch]) / c.std[ch];
      table[ch][b] = v;
    }
  }
}

}  // namespace

void Normalize(const Image& img, const ImageProcessorConfig& c, float* out) {
  float table[3][256];
  NormalizeTables(c, table);
  const size_t plane = static_cast<size_t>(img.width) * img.height;
  const uint8_t* px = img.rgb.data();
  float* r = out;
  float* g = out + plane;
  float* b = out + 2 * plane;
  for (size_t i = 0; i < plane; ++i, px += 3) {
    r[i] = table[0][px[0]];
    g[i] = table[1][px[1]];
    b[i] = table[2][px[2]];
  }
}

void NormalizePatches(const Image& img, const ImageProcessorConfig& c, int patch, float* out) {
  float table[3][256];
  NormalizeTables(c, table);
  const size_t p = static_cast<size_t>(patch), pp = p * p, K = 3 * pp;
  const size_t grid_x = static_cast<size_t>(img.width) / p;
  std::fill_n(out, K, 0.f);  // the class token's row
  for (size_t y = 0; y < static_cast<size_t>(img.height); ++y) {
    const uint8_t* px = img.rgb.data() + y * static_cast<size_t>(img.width) * 3;
    // Row y of every patch in this band of patches: at (y % p) * p within each channel.
    float* band = out + (1 + (y / p) * grid_x) * K + (y % p) * p;
    for (size_t gx = 0; gx < grid_x; ++gx, px += 3 * p) {
      float* r = band + gx * K;
      float* g = r + pp;
      float* b = g + pp;
      for (size_t x = 0; x < p; ++x) {
        r[x] = table[0][px[3 * x]];
        g[x] = table[1][px[3 * x + 1]];
        b[x] = table[2][px[3 * x + 2]];
      }
    }
  }
}

void Preprocess(const Image& in, const ImageProcessorConfig& c, std::vector<float>* out) {
  const Image img = ResizeAndCrop(in, c);
  out->resize(static_cast<size_t>(img.width) * img.height * 3);
  Normalize(img, c, out->data());
}

void SetFastDecodeBounds(const ImageProcessorConfig& c, DecodeOptions* options) {
  if (!c.do_resize) return;
  if (c.shortest_edge > 0) {
    options->jpeg_min_short_edge = c.shortest_edge;
  } else {
    options->jpeg_min_width = c.resize_width;
    options->jpeg_min_height = c.resize_height;
  }
}

}  // namespace sluice::media
