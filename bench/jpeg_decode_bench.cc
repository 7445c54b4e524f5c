// JPEG decode times for `--image-decode exact|fast` (issue 18): per file, (a) libjpeg-turbo's
// full-size decode (what "exact" runs), (b) libjpeg-turbo's 1/8 decode (what "fast" ran before
// media/jpeg_dc.h), (c) sluice's own 1/8 decoder, (d) DecodeImage at 1/8 with it (what "fast"
// runs now: header read + (c)); median, min and max of --reps runs, in one process, the modes
// interleaved round by round. Run it on one core: `taskset -c 0 build/release/jpeg_decode_bench
// FILE...`.
//
// --make PATH [--seed N] writes a camera-like test image first (4032x3024, noise on smooth
// gradients and fine texture, quality 90, 4:2:0: 3-4 MB, as a phone photo), for this and for
// `sluice embed`.

// jpeglib.h needs size_t and FILE declared before it.
// clang-format off
#include <cstdio>
#include <jpeglib.h>
// clang-format on

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "media/image.h"
#include "media/jpeg_dc.h"

namespace {

using sluice::media::DecodeImage;
using sluice::media::DecodeJpegEighth;
using sluice::media::DecodeOptions;
using sluice::media::Image;

std::string MakeCameraLike(int w, int h, int quality, double noise, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> n(0.0, noise);
  std::vector<uint8_t> px(static_cast<size_t>(w) * h * 3);
  size_t i = 0;
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < 3; ++c) {
        const double v = 120 + 60 * std::sin(x / 310.0 + c) * std::cos(y / 260.0) +
                         30 * std::sin((x + y) / 97.0 + 2 * c) +
                         14 * std::sin(x / 7.3 + c) * std::sin(y / 5.1) + n(rng);
        px[i++] = static_cast<uint8_t>(std::clamp(static_cast<int>(std::lround(v)), 0, 255));
      }
    }
  }
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* mem = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &mem, &size);
  cinfo.image_width = static_cast<JDIMENSION>(w);
  cinfo.image_height = static_cast<JDIMENSION>(h);
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);  // 4:2:0 by default
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = px.data() + static_cast<size_t>(cinfo.next_scanline) * w * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::string out(reinterpret_cast<const char*>(mem), size);
  std::free(mem);
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct Stats {
  double median, min, max;
};
Stats Summarise(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  const double med = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {med, v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 9, quality = 90, width = 4032, height = 3024;
  double noise = 7.0;
  uint32_t seed = 1;
  std::vector<std::string> files;
  std::string make;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--reps") {
      reps = std::atoi(next().c_str());
    } else if (a == "--make") {
      make = next();
    } else if (a == "--quality") {
      quality = std::atoi(next().c_str());
    } else if (a == "--seed") {
      seed = static_cast<uint32_t>(std::atoi(next().c_str()));
    } else if (a == "--noise") {
      noise = std::atof(next().c_str());
    } else if (a == "--size") {
      const std::string s = next();
      std::sscanf(s.c_str(), "%dx%d", &width, &height);
    } else {
      files.push_back(a);
    }
  }
  if (!make.empty()) {
    const std::string jpg = MakeCameraLike(width, height, quality, noise, seed);
    std::ofstream(make, std::ios::binary) << jpg;
    std::printf("wrote %s: %dx%d, quality %d, %.2f MB\n", make.c_str(), width, height, quality,
                jpg.size() / 1e6);
    files.push_back(make);
  }
  DecodeOptions full;
  full.exif_orientation = false;
  DecodeOptions lib8 = full;
  lib8.jpeg_min_short_edge = 1;  // the smallest scale: 1/8
  lib8.jpeg_own_eighth_decoder = false;
  DecodeOptions own8 = lib8;
  own8.jpeg_own_eighth_decoder = true;
  const char* names[4] = {"libjpeg-turbo full size", "libjpeg-turbo 1/8", "sluice jpeg_dc 1/8",
                          "DecodeImage 1/8 (fast)"};
  if (reps < 1) return 0;
  for (const std::string& path : files) {
    const std::string bytes = ReadFile(path);
    Image check;
    const bool handled = DecodeJpegEighth(bytes, full, &check);
    auto ref = DecodeImage(bytes, lib8);
    if (!ref.ok()) {
      std::printf("%s: %s\n", path.c_str(), ref.status().ToString().c_str());
      continue;
    }
    std::printf("%s: %.2f MB, 1/8 = %dx%d, own decoder %s%s\n", path.c_str(), bytes.size() / 1e6,
                ref->width, ref->height, handled ? "handles it" : "does not handle it",
                handled ? (check.rgb == ref->rgb ? ", same bytes" : ", DIFFERENT BYTES") : "");
    std::vector<double> ms[4];
    for (int r = 0; r < reps + 1; ++r) {  // round 0 warms up, untimed
      for (int m = 0; m < 4; ++m) {
        const int mode = (m + r) % 4;  // rotate the order
        const auto t0 = std::chrono::steady_clock::now();
        size_t sink = 0;
        if (mode == 0) {
          sink = DecodeImage(bytes, full)->rgb.size();
        } else if (mode == 1) {
          sink = DecodeImage(bytes, lib8)->rgb.size();
        } else if (mode == 2) {
          Image img;
          sink = DecodeJpegEighth(bytes, full, &img) ? img.rgb.size() : 0;
        } else {
          sink = DecodeImage(bytes, own8)->rgb.size();
        }
        const double dt =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        if (sink == 0) std::printf("  (mode %d decoded nothing)\n", mode);
        if (r > 0) ms[mode].push_back(dt);
      }
    }
    for (int m = 0; m < 4; ++m) {
      const Stats s = Summarise(ms[m]);
      std::printf("  %-26s median %7.2f ms  min %7.2f  max %7.2f  (%d runs)\n", names[m], s.median,
                  s.min, s.max, reps);
    }
    const double lib = Summarise(ms[1]).median, own = Summarise(ms[2]).median;
    std::printf("  1/8: libjpeg-turbo / own = %.2fx\n", lib / own);
  }
  return 0;
}
