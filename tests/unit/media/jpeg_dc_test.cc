// sluice's own 1/8 JPEG decoder (media/jpeg_dc.h) against libjpeg-turbo's 1/8 decode, byte for
// byte: JPEGs written here with libjpeg's compressor (noise and gradients, qualities 50-100,
// sampling 4:4:4, 4:2:2, 4:2:0, 4:4:0 and grayscale, restart intervals, optimised Huffman
// tables, odd sizes, several scans), and coefficient files written with jpeg_write_coefficients
// (every Cb/Cr pair through the colour conversion; extreme coefficients and 16-bit
// quantisation tables through the reduced IDCTs' wrap-around and saturation). What it does not
// handle (progressive, truncated, corrupt) comes back "not handled" or decodes to the same
// bytes; random byte flips and cuts never crash it (run under ASan).
#include "media/jpeg_dc.h"

#include <gtest/gtest.h>
#include <jpeglib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "media/image.h"

// The decoder's internals, for comparing the SIMD 2x2 IDCT with its scalar reference (the
// header's functions are file-local: this file gets its own copies, some unused here).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "media/jpeg_dc_inl.h"
#pragma GCC diagnostic pop

namespace sluice::media {
namespace {

struct EncodeSpec {
  int width = 64, height = 48;
  int components = 3;  // 1: grayscale
  int h = 2, v = 2;    // luma sampling (chroma 1x1)
  int quality = 90;
  int restart_interval = 0, restart_in_rows = 0;
  bool optimize = false;
  bool progressive = false;
  bool separate_scans = false;  // one scan per component (jpeg_simple_progression's opposite)
  int noise = 40;               // amplitude of the noise on the gradients
  uint32_t seed = 1;
};

// Noise on smooth gradients, as a camera image at a small scale.
std::vector<uint8_t> MakePixels(const EncodeSpec& s) {
  std::mt19937 rng(s.seed);
  std::uniform_int_distribution<int> noise(-s.noise, s.noise);
  std::vector<uint8_t> px(static_cast<size_t>(s.width) * s.height * s.components);
  size_t i = 0;
  for (int y = 0; y < s.height; ++y) {
    for (int x = 0; x < s.width; ++x) {
      for (int c = 0; c < s.components; ++c) {
        const int base = (x * (97 + 40 * c)) / std::max(1, s.width) +
                         (y * (151 - 30 * c)) / std::max(1, s.height) + ((x / 9 + y / 7) % 3) * 20;
        px[i++] = static_cast<uint8_t>(std::clamp(base + noise(rng), 0, 255));
      }
    }
  }
  return px;
}

// A compressor writing to memory: created, sized, its defaults set and the luma sampling
// factors (h, v) applied; Finish returns the file and frees everything.
struct Compressor {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  unsigned char* mem = nullptr;
  unsigned long size = 0;
  Compressor(int width, int height, int components, J_COLOR_SPACE in, int h, int v, bool quiet) {
    c.err = jpeg_std_error(&err);
    if (quiet) err.emit_message = [](j_common_ptr, int) {};
    jpeg_create_compress(&c);
    jpeg_mem_dest(&c, &mem, &size);
    c.image_width = static_cast<JDIMENSION>(width);
    c.image_height = static_cast<JDIMENSION>(height);
    c.input_components = components;
    c.in_color_space = in;
    jpeg_set_defaults(&c);
    if (components == 3) {
      c.comp_info[0].h_samp_factor = h;
      c.comp_info[0].v_samp_factor = v;
    }
  }
  std::string Finish() {
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    std::string out(reinterpret_cast<const char*>(mem), size);
    std::free(mem);
    return out;
  }
};

std::string Encode(const EncodeSpec& s) {
  Compressor z(s.width, s.height, s.components, s.components == 1 ? JCS_GRAYSCALE : JCS_RGB, s.h,
               s.v, /*quiet=*/false);
  jpeg_compress_struct& c = z.c;
  jpeg_set_quality(&c, s.quality, TRUE);
  c.restart_interval = static_cast<unsigned>(s.restart_interval);
  c.restart_in_rows = s.restart_in_rows;
  c.optimize_coding = s.optimize ? TRUE : FALSE;
  if (s.progressive) jpeg_simple_progression(&c);
  std::vector<jpeg_scan_info> scans;
  if (s.separate_scans && s.components == 3) {
    for (int k = 0; k < 3; ++k) {
      jpeg_scan_info si{};
      si.comps_in_scan = 1;
      si.component_index[0] = k;
      si.Ss = 0;
      si.Se = 63;
      scans.push_back(si);
    }
    c.scan_info = scans.data();
    c.num_scans = 3;
  }
  jpeg_start_compress(&c, TRUE);
  const std::vector<uint8_t> px = MakePixels(s);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = const_cast<JSAMPROW>(px.data()) +
                   static_cast<size_t>(c.next_scanline) * s.width * s.components;
    jpeg_write_scanlines(&c, &row, 1);
  }
  return z.Finish();
}

// libjpeg-turbo's 1/8 decode, through DecodeImage with our decoder switched off.
StatusOr<Image> Reference(const std::string& jpg) {
  DecodeOptions o;
  o.exif_orientation = false;
  o.jpeg_min_short_edge = 1;  // the smallest scale, 1/8
  o.jpeg_own_eighth_decoder = false;
  return DecodeImage(jpg, o);
}

std::string Describe(const EncodeSpec& s) {
  char b[200];
  std::snprintf(b, sizeof(b), "%dx%d comps=%d %dx%d q=%d ri=%d rows=%d opt=%d sep=%d noise=%d",
                s.width, s.height, s.components, s.h, s.v, s.quality, s.restart_interval,
                s.restart_in_rows, s.optimize, s.separate_scans, s.noise);
  return b;
}

// Decodes with both, requires our decoder to handle the file and agree to the byte.
void ExpectSame(const std::string& jpg, const std::string& what) {
  SCOPED_TRACE(what);
  auto want = Reference(jpg);
  ASSERT_TRUE(want.ok()) << want.status().ToString();
  Image got;
  ASSERT_TRUE(DecodeJpegEighth(jpg, DecodeOptions{}, &got));
  ASSERT_EQ(got.width, want->width);
  ASSERT_EQ(got.height, want->height);
  size_t diffs = 0, first = got.rgb.size();
  for (size_t i = 0; i < got.rgb.size(); ++i) {
    if (got.rgb[i] != want->rgb[i]) {
      if (diffs++ == 0) first = i;
    }
  }
  EXPECT_EQ(diffs, 0u) << "first at byte " << first << ": " << int(got.rgb[first]) << " vs "
                       << int(want->rgb[first]);
  // And through DecodeImage (our decoder switched on: the default).
  DecodeOptions o;
  o.exif_orientation = false;
  o.jpeg_min_short_edge = 1;
  auto via = DecodeImage(jpg, o);
  ASSERT_TRUE(via.ok());
  EXPECT_EQ(via->rgb, want->rgb);
}

TEST(JpegDc, MatchesLibjpegTurboAcrossSamplingQualityAndSizes) {
  const int sizes[][2] = {{1, 1},   {7, 9},   {8, 8},    {16, 16},   {17, 33},
                          {33, 17}, {64, 48}, {100, 75}, {129, 257}, {1001, 677}};
  const int samplings[][3] = {{3, 1, 1}, {3, 2, 1}, {3, 2, 2}, {3, 1, 2}, {1, 1, 1}};
  const int qualities[] = {50, 75, 90, 95, 100};
  int n = 0;
  uint32_t seed = 7;
  for (const auto& sz : sizes) {
    for (const auto& sm : samplings) {
      for (int q : qualities) {
        EncodeSpec s;
        s.width = sz[0];
        s.height = sz[1];
        s.components = sm[0];
        s.h = sm[1];
        s.v = sm[2];
        s.quality = q;
        s.seed = ++seed;
        s.noise = (seed % 3 == 0) ? 120 : 30;
        s.optimize = seed % 2 == 0;
        ExpectSame(Encode(s), Describe(s));
        ++n;
      }
    }
  }
  EXPECT_EQ(n, 10 * 5 * 5);
}

TEST(JpegDc, RestartIntervalsAndSeparateScans) {
  const int samplings[][3] = {{3, 1, 1}, {3, 2, 1}, {3, 2, 2}, {3, 1, 2}, {1, 1, 1}};
  uint32_t seed = 100;
  for (const auto& sm : samplings) {
    for (int ri : {1, 2, 5, 7, 64}) {
      EncodeSpec s;
      s.width = 203;
      s.height = 97;
      s.components = sm[0];
      s.h = sm[1];
      s.v = sm[2];
      s.restart_interval = ri;
      s.optimize = ri % 2 == 1;
      s.seed = ++seed;
      ExpectSame(Encode(s), Describe(s));
    }
    EncodeSpec rows;
    rows.width = 150;
    rows.height = 130;
    rows.components = sm[0];
    rows.h = sm[1];
    rows.v = sm[2];
    rows.restart_in_rows = 1;
    rows.seed = ++seed;
    ExpectSame(Encode(rows), Describe(rows));
    EncodeSpec sep = rows;
    sep.restart_in_rows = 0;
    sep.restart_interval = 3;
    sep.separate_scans = true;
    if (sep.components == 3) ExpectSame(Encode(sep), Describe(sep));
  }
}

// Each thread keeps built Huffman tables by their specification (12 slots). Photos with
// tables of their own (optimised coding: 20 distinct sets, more than the slots hold), in
// between photos with the standard tables, each twice in a shuffled order: every decode still
// matches libjpeg-turbo, whether its tables were cached, evicted or rebuilt.
TEST(JpegDc, CachedHuffmanTablesAcrossManyEncoders) {
  std::vector<std::pair<std::string, std::string>> files;
  for (int i = 0; i < 20; ++i) {
    EncodeSpec s;
    s.width = 80 + 8 * (i % 5);
    s.height = 56;
    s.components = i % 4 == 3 ? 1 : 3;
    s.h = 1 + i % 2;
    s.v = 1 + (i / 2) % 2;
    s.quality = 60 + 2 * i;
    s.optimize = i % 3 != 0;  // a third with the standard tables
    s.noise = 20 + 7 * i;
    s.seed = 500 + static_cast<uint32_t>(i);
    files.emplace_back(Encode(s), Describe(s));
  }
  std::vector<size_t> order;
  for (size_t i = 0; i < files.size(); ++i) order.insert(order.end(), {i, i});
  std::mt19937 rng(7);
  std::shuffle(order.begin(), order.end(), rng);
  for (size_t i : order) ExpectSame(files[i].first, files[i].second);
}

// ---- Coefficient files: jpeg_write_coefficients with coefficients and tables we choose. ----

struct CoefSpec {
  int width = 64, height = 64;
  int components = 3;
  int h = 1, v = 1;
  uint16_t quant[2][64];  // natural order; [0] luma, [1] chroma
};

// fill(component, block x, block y, coefficients in natural order)
template <typename Fill>
std::string WriteCoefficients(const CoefSpec& s, Fill fill) {
  // quiet: "tables too coarse for baseline" is intended
  Compressor z(s.width, s.height, s.components, s.components == 1 ? JCS_GRAYSCALE : JCS_YCbCr, s.h,
               s.v, /*quiet=*/true);
  jpeg_compress_struct& c = z.c;
  c.optimize_coding = TRUE;  // large coefficients need their own Huffman tables
  for (int t = 0; t < 2; ++t) {
    if (c.quant_tbl_ptrs[t] == nullptr)
      c.quant_tbl_ptrs[t] = jpeg_alloc_quant_table(reinterpret_cast<j_common_ptr>(&c));
    for (int i = 0; i < 64; ++i) c.quant_tbl_ptrs[t]->quantval[i] = s.quant[t][i];
  }
  const int max_h = s.components == 3 ? s.h : 1, max_v = s.components == 3 ? s.v : 1;
  jvirt_barray_ptr arrays[3] = {};
  int wb[3], hb[3];
  for (int k = 0; k < s.components; ++k) {
    const int ch = k == 0 ? max_h : 1, cv = k == 0 ? max_v : 1;
    wb[k] = (s.width * ch + 8 * max_h - 1) / (8 * max_h);
    hb[k] = (s.height * cv + 8 * max_v - 1) / (8 * max_v);
    arrays[k] = (*c.mem->request_virt_barray)(reinterpret_cast<j_common_ptr>(&c), JPOOL_IMAGE, TRUE,
                                              static_cast<JDIMENSION>((wb[k] + ch - 1) / ch * ch),
                                              static_cast<JDIMENSION>((hb[k] + cv - 1) / cv * cv),
                                              static_cast<JDIMENSION>(cv));
  }
  jpeg_write_coefficients(&c, arrays);
  for (int k = 0; k < s.components; ++k) {
    const int ch = k == 0 ? max_h : 1, cv = k == 0 ? max_v : 1;
    const int rows = (hb[k] + cv - 1) / cv * cv, cols = (wb[k] + ch - 1) / ch * ch;
    for (int by = 0; by < rows; ++by) {
      JBLOCKARRAY row = (*c.mem->access_virt_barray)(reinterpret_cast<j_common_ptr>(&c), arrays[k],
                                                     static_cast<JDIMENSION>(by), 1, TRUE);
      for (int bx = 0; bx < cols; ++bx) {
        JCOEF* blk = row[0][bx];
        std::memset(blk, 0, sizeof(JBLOCK));
        fill(k, bx, by, blk);
      }
    }
  }
  return z.Finish();
}

TEST(JpegDc, EveryChromaPairThroughTheColourConversion) {
  // 4:4:4, DC only, q = 8: each 1/8 sample is DC + 128, so block (x, y) carries Cb = x,
  // Cr = y and a pseudo-random Y: all 65,536 (Cb, Cr) pairs.
  CoefSpec s;
  s.width = s.height = 256 * 8;
  for (auto& t : s.quant) {
    for (auto& q : t) q = 8;
  }
  const std::string jpg = WriteCoefficients(s, [](int k, int bx, int by, JCOEF* blk) {
    const int v = k == 0 ? (bx * 37 + by * 101) & 255 : (k == 1 ? bx : by);
    blk[0] = static_cast<JCOEF>(v - 128);
  });
  ExpectSame(jpg, "all Cb/Cr pairs");
}

TEST(JpegDc, ExtremeCoefficientsAndTablesMatchTheSimdIdct) {
  // Coefficients up to the 8-bit format's limits and quantisation values up to 65535:
  // dequantised values wrap in 16 bits, sums wrap in 32, outputs saturate (jsimd_idct_2x2)
  // or wrap (jpeg_idct_1x1) exactly as libjpeg-turbo's.
  std::mt19937 rng(42);
  for (int round = 0; round < 12; ++round) {
    CoefSpec s;
    s.width = 8 * 40 + 3;
    s.height = 8 * 24 + 5;
    const int mode = round % 4;
    s.h = mode == 1 || mode == 3 ? 2 : 1;
    s.v = mode == 2 || mode == 3 ? 2 : 1;
    s.components = round == 11 ? 1 : 3;
    for (auto& t : s.quant) {
      for (auto& q : t) {
        const int pick = static_cast<int>(rng() % 4);
        q = static_cast<uint16_t>(pick == 0   ? 1 + rng() % 8
                                  : pick == 1 ? 1 + rng() % 255
                                  : pick == 2 ? 1 + rng() % 65535
                                              : (round < 6 ? 16 : 40000 + rng() % 25535));
      }
    }
    uint32_t st = static_cast<uint32_t>(round) * 7919u + 1u;
    const std::string jpg = WriteCoefficients(s, [&](int, int, int, JCOEF* blk) {
      st = st * 1664525u + 1013904223u;
      // DC within +-1023, AC within +-1023: what the 8-bit encoder can code.
      blk[0] = static_cast<JCOEF>(static_cast<int>((st >> 8) % 2047) - 1023);
      for (int i = 1; i < 64; ++i) {
        st = st * 1664525u + 1013904223u;
        const uint32_t r = st >> 16;
        if (r % 5 < 2) blk[i] = static_cast<JCOEF>(static_cast<int>(r % 2047) - 1023);
      }
    });
    ExpectSame(jpg, "extreme round " + std::to_string(round));
  }
}

// ---- What it does not handle. ----

// Idct2x2 (pass 1 in SSE2 on x86-64) gives Idct2x2Scalar's bits on any block: random and
// extreme coefficients and quantisation values over the whole int16 range (products that
// wrap in 16 bits, sums that wrap in 32), and what the columns 2, 4, 6 hold is ignored.
TEST(JpegDc, SimdIdct2x2IsTheScalarOneBitForBit) {
  std::mt19937 rng(5);
  const int16_t extremes[] = {-32768, -32767, -1, 0, 1, 255, 1023, 2047, 32767};
  alignas(16) int16_t blk[64], q[64];
  for (int t = 0; t < 200000; ++t) {
    const int mode = t % 4;
    for (int i = 0; i < 64; ++i) {
      switch (mode) {
        case 0:  // in range: coefficients of real images, quantisation 1..255
          blk[i] = static_cast<int16_t>(static_cast<int>(rng() % 2048) - 1024);
          q[i] = static_cast<int16_t>(1 + rng() % 255);
          break;
        case 1:  // anything
          blk[i] = static_cast<int16_t>(rng());
          q[i] = static_cast<int16_t>(rng());
          break;
        default:  // extremes
          blk[i] = extremes[rng() % 9];
          q[i] = extremes[rng() % 9];
      }
    }
    uint8_t want[4], got[4];
    Idct2x2Scalar(blk, q, want, want + 2);
    Idct2x2(blk, q, got, got + 2);
    ASSERT_EQ(std::memcmp(want, got, 4), 0) << "block " << t << " mode " << mode;
  }
}

TEST(JpegDc, ProgressiveTruncatedAndCorruptAreNotHandledOrTheSame) {
  EncodeSpec s;
  s.width = 120;
  s.height = 90;
  s.progressive = true;
  Image out;
  EXPECT_FALSE(DecodeJpegEighth(Encode(s), DecodeOptions{}, &out));
  s.progressive = false;
  s.restart_interval = 4;
  const std::string good = Encode(s);
  ASSERT_TRUE(DecodeJpegEighth(good, DecodeOptions{}, &out));
  // Every cut: not handled, or (cut after the last MCU) the same as libjpeg-turbo.
  for (size_t n = 0; n < good.size(); n += 1 + n / 16) {
    const std::string cut = good.substr(0, n);
    Image got;
    if (DecodeJpegEighth(cut, DecodeOptions{}, &got)) {
      auto want = Reference(cut);
      ASSERT_TRUE(want.ok()) << n;
      EXPECT_EQ(got.rgb, want->rgb) << n;
    }
  }
  // Over the limits: refused before decoding.
  DecodeOptions small;
  small.max_pixels = 100;
  EXPECT_FALSE(DecodeJpegEighth(good, small, &out));
}

TEST(JpegDc, RandomDamageNeverCrashesAndWhatDecodesMatches) {
  std::mt19937 rng(5);
  const int samplings[][3] = {{3, 1, 1}, {3, 2, 1}, {3, 2, 2}, {3, 1, 2}, {1, 1, 1}};
  int handled = 0, checked = 0;
  for (int f = 0; f < 10; ++f) {
    EncodeSpec s;
    s.width = 40 + f * 13;
    s.height = 30 + f * 7;
    s.components = samplings[f % 5][0];
    s.h = samplings[f % 5][1];
    s.v = samplings[f % 5][2];
    s.restart_interval = f % 2 == 0 ? 3 : 0;
    s.optimize = f % 3 == 0;
    s.seed = static_cast<uint32_t>(f);
    const std::string good = Encode(s);
    for (int trial = 0; trial < 300; ++trial) {
      std::string bad = good;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) {
        bad[rng() % bad.size()] = static_cast<char>(rng() & 255);
      }
      if (rng() % 4 == 0) bad.resize(rng() % bad.size());
      Image got;
      if (!DecodeJpegEighth(bad, DecodeOptions{}, &got)) continue;
      ++handled;
      // What it decodes, libjpeg-turbo decodes to the same bytes (corrupt data included: the
      // damage was then in coefficient values or in skipped segments).
      auto want = Reference(bad);
      ASSERT_TRUE(want.ok()) << "file " << f << " trial " << trial << ": "
                             << want.status().ToString();
      ++checked;
      EXPECT_EQ(got.width, want->width);
      EXPECT_EQ(got.rgb, want->rgb) << "file " << f << " trial " << trial;
    }
  }
  EXPECT_GT(handled, 0);
  EXPECT_EQ(checked, handled);
}

}  // namespace
}  // namespace sluice::media
