#include "media/jpeg_dc.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <vector>

#include "media/jpeg_dc_inl.h"

namespace sluice::media {

namespace {

// ---- Markers and the decoder proper. ----

constexpr int kMaxDimension = 65500;  // JPEG_MAX_DIMENSION
constexpr size_t kPadding = 8192;     // > the most one MCU can read (10 blocks * 65 refills * 7)

struct Component {
  int id = 0, h = 1, v = 1, tq = 0;
  int rh = 1, rv = 1;  // max sampling / own sampling
  bool idct2 = false;  // 2x2 IDCT: subsampled 2x2
  int wblocks = 0, hblocks = 0;
  int stride = 0;
  std::vector<uint8_t> plane;
  bool scanned = false;
};

// Built Huffman tables by their specification, per thread: building one (the multi-symbol
// skip table above all) takes ~0.1 ms, and photos from one camera or encoder mostly share
// their tables. A scan's tables are pinned while it decodes (one slot per scan component
// and class); the other slots are reused least recently used first.
class TableCache {
 public:
  // The table for `spec` (dc or ac), for scan component `comp` (0-3); null if the
  // specification is invalid.
  const HuffTable* Get(const HuffSpec& spec, bool dc, size_t comp) {
    for (Slot& s : slots_) {
      if (s.valid && s.dc == dc && Same(s.spec, spec)) {
        s.used = ++clock_;
        Pin(&s, dc, comp);
        return &s.table;
      }
    }
    Slot* victim = nullptr;
    for (Slot& s : slots_) {
      if (Pinned(&s)) continue;
      if (victim == nullptr || !s.valid || (victim->valid && s.used < victim->used)) victim = &s;
    }
    victim->valid = false;
    if (!BuildHuffTable(spec, dc, &victim->table)) return nullptr;
    victim->valid = true;
    victim->dc = dc;
    victim->spec = spec;
    victim->used = ++clock_;
    Pin(victim, dc, comp);
    return &victim->table;
  }
  // A new scan: its tables may take any slot.
  void Unpin() { std::fill(std::begin(pinned_), std::end(pinned_), nullptr); }

 private:
  struct Slot {
    bool valid = false, dc = false;
    uint64_t used = 0;
    HuffSpec spec;
    HuffTable table;
  };
  static bool Same(const HuffSpec& a, const HuffSpec& b) {
    return std::memcmp(a.counts, b.counts, sizeof(a.counts)) == 0 &&
           std::memcmp(a.values, b.values, sizeof(a.values)) == 0;
  }
  void Pin(Slot* s, bool dc, size_t comp) { pinned_[(dc ? 0 : 4) + comp] = s; }
  bool Pinned(const Slot* s) const {
    return std::find(std::begin(pinned_), std::end(pinned_), s) != std::end(pinned_);
  }
  // 8 pinned at most (4 components x dc/ac), plus room for the tables of other encoders.
  std::vector<Slot> slots_ = std::vector<Slot>(12);  // ~37 KB each, on the heap
  Slot* pinned_[8] = {};
  uint64_t clock_ = 0;
};

TableCache& Tables() {
  thread_local TableCache cache;
  return cache;
}

class Decoder {
 public:
  Decoder(const uint8_t* data, size_t size, std::vector<uint8_t>* scan,
          std::vector<std::vector<uint8_t>>* planes)
      : d_(data), end_(data + size), scan_(*scan), planes_(*planes) {}
  bool Run(const DecodeOptions& limits, Image* out);
  // The components' planes back to the thread's spares (ReadSof takes them from there).
  void ReturnPlanes() {
    for (Component& k : comps_) {
      if (k.plane.capacity() > 0) planes_.push_back(std::move(k.plane));
    }
  }

 private:
  bool ReadU16(const uint8_t*& p, int* v) const {
    if (end_ - p < 2) return false;
    *v = (p[0] << 8) | p[1];
    p += 2;
    return true;
  }
  bool Segment(const uint8_t*& p, const uint8_t** body, size_t* len) const {
    int n = 0;
    if (!ReadU16(p, &n) || n < 2 || end_ - p < n - 2) return false;
    *body = p;
    *len = static_cast<size_t>(n - 2);
    p += n - 2;
    return true;
  }
  bool ReadDqt(const uint8_t* b, size_t n);
  bool ReadDht(const uint8_t* b, size_t n);
  bool ReadSof(const uint8_t* b, size_t n, const DecodeOptions& limits);
  bool ReadSos(const uint8_t* b, size_t n, const uint8_t*& p);
  bool DecodeScan(const std::vector<int>& comps, const int* dc_tbl, const int* ac_tbl,
                  const uint8_t*& p);
  void Output(Image* out) const;

  const uint8_t* d_;
  const uint8_t* end_;
  bool quant_defined_[4] = {};
  int16_t quant_[4][64] = {};  // natural order, as ISLOW_MULT_TYPE (short)
  HuffSpec dc_spec_[4], ac_spec_[4];
  int restart_interval_ = 0;
  bool jfif_ = false, adobe_ = false;
  int adobe_transform_ = 0;
  bool have_sof_ = false, seen_sos_ = false;
  int width_ = 0, height_ = 0, max_h_ = 1, max_v_ = 1;
  int mcus_per_row_ = 0, mcu_rows_ = 0;
  std::vector<Component> comps_;
  std::vector<uint8_t>& scan_;  // unstuffed entropy-coded data + padding (the thread's)
  std::vector<std::vector<uint8_t>>& planes_;  // the thread's spare component planes
  std::vector<size_t> seg_end_;
  const HuffTable* dc_tables_[4] = {};  // the scan's, from the thread's TableCache
  const HuffTable* ac_tables_[4] = {};
};

bool Decoder::ReadDqt(const uint8_t* b, size_t n) {
  size_t i = 0;
  while (i < n) {
    const int pq = b[i] >> 4, tq = b[i] & 15;
    ++i;
    if (tq > 3 || pq > 1) return false;
    const size_t bytes = pq ? 128 : 64;
    if (n - i < bytes) return false;  // libjpeg pads a short table with 1s: not handled
    for (int k = 0; k < 64; ++k) {
      const int q = pq ? (b[i + 2 * k] << 8) | b[i + 2 * k + 1] : b[i + k];
      quant_[tq][kNatural[k]] = static_cast<int16_t>(static_cast<uint16_t>(q));
    }
    quant_defined_[tq] = true;
    i += bytes;
  }
  return true;
}

bool Decoder::ReadDht(const uint8_t* b, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (n - i < 17) return false;
    const int tc = b[i] >> 4, th = b[i] & 15;
    if (tc > 1 || th > 3) return false;
    HuffSpec& s = tc == 0 ? dc_spec_[th] : ac_spec_[th];
    int total = 0;
    for (int l = 1; l <= 16; ++l) {
      s.counts[l] = b[i + static_cast<size_t>(l)];
      total += s.counts[l];
    }
    i += 17;
    if (total > 256 || n - i < static_cast<size_t>(total)) return false;
    std::memset(s.values, 0, sizeof(s.values));
    std::memcpy(s.values, b + i, static_cast<size_t>(total));
    s.defined = true;
    i += static_cast<size_t>(total);
  }
  return true;
}

bool Decoder::ReadSof(const uint8_t* b, size_t n, const DecodeOptions& limits) {
  if (have_sof_ || n < 6) return false;
  have_sof_ = true;
  if (b[0] != 8) return false;
  height_ = (b[1] << 8) | b[2];
  width_ = (b[3] << 8) | b[4];
  const int nc = b[5];
  if (height_ <= 0 || width_ <= 0 || height_ > kMaxDimension || width_ > kMaxDimension) {
    return false;
  }
  if (width_ > limits.max_side || height_ > limits.max_side ||
      static_cast<int64_t>(width_) * height_ > limits.max_pixels) {
    return false;
  }
  if ((nc != 1 && nc != 3) || n != 6 + 3 * static_cast<size_t>(nc)) return false;
  comps_.resize(static_cast<size_t>(nc));
  for (int c = 0; c < nc; ++c) {
    Component& k = comps_[static_cast<size_t>(c)];
    k.id = b[6 + 3 * c];
    k.h = b[7 + 3 * c] >> 4;
    k.v = b[7 + 3 * c] & 15;
    k.tq = b[8 + 3 * c];
    if (k.h < 1 || k.h > 2 || k.v < 1 || k.v > 2 || k.tq > 3) return false;
    for (int o = 0; o < c; ++o) {
      if (comps_[static_cast<size_t>(o)].id == k.id) return false;
    }
    max_h_ = std::max(max_h_, k.h);
    max_v_ = std::max(max_v_, k.v);
  }
  mcus_per_row_ = (width_ + 8 * max_h_ - 1) / (8 * max_h_);
  mcu_rows_ = (height_ + 8 * max_v_ - 1) / (8 * max_v_);
  for (Component& k : comps_) {
    k.rh = max_h_ / k.h;
    k.rv = max_v_ / k.v;
    k.idct2 = k.rh == 2 && k.rv == 2;
    k.wblocks =
        static_cast<int>((static_cast<int64_t>(width_) * k.h + 8 * max_h_ - 1) / (8 * max_h_));
    k.hblocks =
        static_cast<int>((static_cast<int64_t>(height_) * k.v + 8 * max_v_ - 1) / (8 * max_v_));
    const int ss = k.idct2 ? 2 : 1;
    k.stride = mcus_per_row_ * k.h * ss;
    if (!planes_.empty()) {
      k.plane = std::move(planes_.back());
      planes_.pop_back();
    }
    k.plane.assign(static_cast<size_t>(k.stride) * mcu_rows_ * k.v * ss, 0);
  }
  return true;
}

// Copies the entropy-coded data at p (up to the marker that ends it) without the stuffed
// zero bytes, splitting it at restart markers (which must come in order). Leaves p at the
// marker that ended the scan (or the end of the data).
bool Decoder::ReadSos(const uint8_t* b, size_t n, const uint8_t*& p) {
  if (!have_sof_ || n < 1) return false;
  const int ns = b[0];
  if (ns < 1 || ns > 4 || n != 4 + 2 * static_cast<size_t>(ns)) return false;
  std::vector<int> comps;
  int dc_tbl[4] = {}, ac_tbl[4] = {};
  int blocks = 0;
  for (int i = 0; i < ns; ++i) {
    const int id = b[1 + 2 * i];
    int ci = -1;
    for (size_t c = 0; c < comps_.size(); ++c) {
      if (comps_[c].id == id) ci = static_cast<int>(c);
    }
    if (ci < 0 || comps_[static_cast<size_t>(ci)].scanned) return false;
    for (int o : comps) {
      if (o == ci) return false;
    }
    comps.push_back(ci);
    dc_tbl[i] = b[2 + 2 * i] >> 4;
    ac_tbl[i] = b[2 + 2 * i] & 15;
    if (dc_tbl[i] > 3 || ac_tbl[i] > 3) return false;
    const Component& k = comps_[static_cast<size_t>(ci)];
    blocks += ns == 1 ? 1 : k.h * k.v;
  }
  if (blocks > 10) return false;  // D_MAX_BLOCKS_IN_MCU
  const int ss = b[1 + 2 * ns], se = b[2 + 2 * ns], ahal = b[3 + 2 * ns];
  if (ss != 0 || se != 63 || ahal != 0) return false;
  return DecodeScan(comps, dc_tbl, ac_tbl, p);
}

bool Decoder::DecodeScan(const std::vector<int>& comps, const int* dc_tbl, const int* ac_tbl,
                         const uint8_t*& p) {
  const size_t ns = comps.size();
  Tables().Unpin();
  for (size_t i = 0; i < ns; ++i) {
    const Component& k = comps_[static_cast<size_t>(comps[i])];
    if (!quant_defined_[k.tq]) return false;
    if (!dc_spec_[dc_tbl[i]].defined || !ac_spec_[ac_tbl[i]].defined) return false;
    dc_tables_[i] = Tables().Get(dc_spec_[dc_tbl[i]], true, i);
    ac_tables_[i] = Tables().Get(ac_spec_[ac_tbl[i]], false, i);
    if (dc_tables_[i] == nullptr || ac_tables_[i] == nullptr) return false;
  }
  // Unstuff up to the marker that ends the scan.
  scan_.clear();
  scan_.reserve(static_cast<size_t>(end_ - p) + kPadding);
  seg_end_.clear();
  int next_rst = 0;
  while (p < end_) {
    const uint8_t* ff = static_cast<const uint8_t*>(std::memchr(p, 0xFF, end_ - p));
    const uint8_t* stop = ff != nullptr ? ff : end_;
    scan_.insert(scan_.end(), p, stop);
    p = stop;
    if (ff == nullptr) break;
    if (end_ - ff < 2) break;  // a lone 0xFF at the very end: left for the marker check
    const uint8_t m = ff[1];
    if (m == 0x00) {
      scan_.push_back(0xFF);
      p = ff + 2;
    } else if (m >= 0xD0 && m <= 0xD7) {
      if (m - 0xD0 != next_rst) return false;
      next_rst = (next_rst + 1) & 7;
      seg_end_.push_back(scan_.size());
      p = ff + 2;
    } else {
      break;  // the marker after the scan (0xFF 0xFF included: not handled later)
    }
  }
  seg_end_.push_back(scan_.size());
  const size_t data_size = scan_.size();
  scan_.resize(data_size + kPadding, 0);

  // MCU geometry.
  int64_t mcus_x, mcus_y;
  if (ns == 1) {
    const Component& k = comps_[static_cast<size_t>(comps[0])];
    mcus_x = k.wblocks;
    mcus_y = k.hblocks;
  } else {
    mcus_x = mcus_per_row_;
    mcus_y = mcu_rows_;
  }
  const int64_t total = mcus_x * mcus_y;
  const int64_t ri = restart_interval_;
  const int64_t segments = ri > 0 ? (total + ri - 1) / ri : 1;
  if (static_cast<int64_t>(seg_end_.size()) != segments) return false;

  const uint8_t* base = scan_.data();
  const uint8_t* data_end = base + data_size;
  size_t seg = 0;
  // Whether the segment just decoded stayed within its data (libjpeg pads with zeros and
  // warns where it does not).
  auto within = [&](const BitReader& r) {
    const size_t start = seg == 0 ? 0 : seg_end_[seg - 1];
    return r.Consumed() <= static_cast<int64_t>(seg_end_[seg] - start) * 8;
  };
  BitReader br;
  br.Reset(base);
  int dc_pred[4] = {};
  int64_t to_go = ri;
  alignas(32) int16_t blk[72];
  // What each block of a scan component needs, fixed for the scan.
  struct ScanComp {
    const HuffTable *dct, *act;
    const int16_t* q;
    uint8_t* plane;
    int64_t stride;
    int bh, bv;
    bool idct2;
  } sc[4];
  for (size_t i = 0; i < ns; ++i) {
    Component& k = comps_[static_cast<size_t>(comps[i])];
    sc[i] = {dc_tables_[i], ac_tables_[i],     quant_[k.tq],      k.plane.data(),
             k.stride,      ns == 1 ? 1 : k.h, ns == 1 ? 1 : k.v, k.idct2};
  }
  int64_t mx = 0, my = 0;  // the MCU's column and row
  for (int64_t m = 0; m < total; ++m, ++mx) {
    if (mx == mcus_x) {
      mx = 0;
      ++my;
    }
    if (ri > 0) {
      if (to_go == 0) {
        if (!within(br)) return false;
        ++seg;
        br.Reset(base + seg_end_[seg - 1]);
        std::fill(std::begin(dc_pred), std::end(dc_pred), 0);
        to_go = ri;
      }
      --to_go;
    }
    for (size_t i = 0; i < ns; ++i) {
      const ScanComp& k = sc[i];
      for (int yy = 0; yy < k.bv; ++yy) {
        const int64_t by = my * k.bv + yy;
        for (int xx = 0; xx < k.bh; ++xx) {
          const int64_t bx = mx * k.bh + xx;
          int diff;
          if (k.idct2) {
            // Idct2x2 reads rows 0, 1, 3, 5 and 7 only: what lands elsewhere is never read.
            // (One 16-byte store each: a loop over the rows compiled to a loop of memsets.)
            std::memset(blk, 0, 16);
            std::memset(blk + 8, 0, 16);
            std::memset(blk + 24, 0, 16);
            std::memset(blk + 40, 0, 16);
            std::memset(blk + 56, 0, 16);
            if (!DecodeBlock(br, *k.dct, *k.act, &diff, blk)) return false;
          } else if (!SkipBlock(br, *k.dct, *k.act, &diff)) {
            return false;
          }
          dc_pred[i] += diff;
          if (dc_pred[i] > (1 << 30) || dc_pred[i] < -(1 << 30)) return false;
          const int16_t dc = static_cast<int16_t>(static_cast<uint16_t>(dc_pred[i]));
          if (k.idct2) {
            blk[0] = dc;
            uint8_t* o = k.plane + (2 * by) * k.stride + 2 * bx;
            Idct2x2(blk, k.q, o, o + k.stride);
          } else {
            k.plane[by * k.stride + bx] = Idct1x1(dc, k.q[0]);
          }
        }
      }
    }
    // p runs up to 8 bytes ahead of what is consumed; the exact check is within() below.
    if (br.p > data_end + 16) return false;
  }
  if (!within(br)) return false;
  if (seg + 1 != seg_end_.size()) return false;
  for (int c : comps) comps_[static_cast<size_t>(c)].scanned = true;
  return true;
}

void Decoder::Output(Image* out) const {
  const int ow = (width_ + 7) / 8, oh = (height_ + 7) / 8;
  out->width = ow;
  out->height = oh;
  out->rgb.resize(static_cast<size_t>(ow) * oh * 3);
  uint8_t* dst = out->rgb.data();
  // A component's output row r and column x: its own sample (2x2 IDCT or full size), or the
  // one replicated from r / 2, x / 2 (box upsampling: fancy upsampling is off at 1/8).
  auto row_of = [](const Component& k, int r) {
    const int shift = k.idct2 ? 0 : k.rv - 1;
    return k.plane.data() + static_cast<size_t>(r >> shift) * k.stride;
  };
  auto xshift = [](const Component& k) { return k.idct2 ? 0 : k.rh - 1; };
  const Component& y = comps_[0];
  const int ys = xshift(y);
  if (comps_.size() == 1) {
    for (int r = 0; r < oh; ++r) {
      const uint8_t* src = row_of(y, r);
      for (int x = 0; x < ow; ++x, dst += 3) dst[0] = dst[1] = dst[2] = src[x >> ys];
    }
    return;
  }
  static const YccTables t;
  const Component& cb = comps_[1];
  const Component& cr = comps_[2];
  const int us = xshift(cb), vs = xshift(cr);
  for (int r = 0; r < oh; ++r) {
    const uint8_t* py = row_of(y, r);
    const uint8_t* pu = row_of(cb, r);
    const uint8_t* pv = row_of(cr, r);
    for (int x = 0; x < ow; ++x, dst += 3) {
      const int yy = py[x >> ys], u = pu[x >> us], v = pv[x >> vs];
      dst[0] = Clamp255(yy + t.cr_r[v]);
      dst[1] = Clamp255(yy + ((t.cb_g[u] + t.cr_g[v]) >> 16));
      dst[2] = Clamp255(yy + t.cb_b[u]);
    }
  }
}

bool Decoder::Run(const DecodeOptions& limits, Image* out) {
  const uint8_t* p = d_;
  if (end_ - p < 2 || p[0] != 0xFF || p[1] != 0xD8) return false;
  p += 2;
  for (;;) {
    if (end_ - p < 2 || p[0] != 0xFF) return false;
    while (p < end_ && *p == 0xFF) ++p;  // fill bytes
    if (p >= end_) return false;
    const uint8_t m = *p++;
    const uint8_t* body = nullptr;
    size_t len = 0;
    if (m == 0xD9) break;  // EOI
    if (!Segment(p, &body, &len)) return false;
    if (m == 0xDB) {
      if (!ReadDqt(body, len)) return false;
    } else if (m == 0xC4) {
      if (!ReadDht(body, len)) return false;
    } else if (m == 0xDD) {
      if (len != 2) return false;
      restart_interval_ = (body[0] << 8) | body[1];
    } else if (m == 0xC0 || m == 0xC1) {
      if (!ReadSof(body, len, limits)) return false;
    } else if (m == 0xDA) {
      if (!ReadSos(body, len, p)) return false;
      seen_sos_ = true;
    } else if (m == 0xE0) {
      // libjpeg guesses the colour space from the markers before the first scan.
      if (!seen_sos_ && len >= 14 && std::memcmp(body, "JFIF\0", 5) == 0) jfif_ = true;
    } else if (m == 0xEE) {
      if (!seen_sos_ && len >= 12 && std::memcmp(body, "Adobe", 5) == 0) {
        adobe_ = true;
        adobe_transform_ = body[11];
      }
    } else if ((m >= 0xE1 && m <= 0xEF) || m == 0xFE) {
      // other APPn, COM: skipped
    } else {
      return false;  // SOF2+, DAC, DNL, RSTn out of a scan, JPGn, ...
    }
  }
  if (!have_sof_) return false;
  for (const Component& k : comps_) {
    if (!k.scanned) return false;
  }
  if (comps_.size() == 3) {
    // jdapimin.c's colour space guess, where it says YCbCr for sure.
    bool ycc;
    if (jfif_) {
      ycc = true;
    } else if (adobe_) {
      ycc = adobe_transform_ == 1;
    } else {
      ycc = comps_[0].id == 1 && comps_[1].id == 2 && comps_[2].id == 3;
    }
    if (!ycc) return false;
  }
  Output(out);
  return true;
}

}  // namespace

bool DecodeJpegEighth(std::string_view bytes, const DecodeOptions& limits, Image* out) {
  // The unstuffed scan (as large as the file) lives in a buffer the thread keeps: a fresh one
  // per photo cost a page fault per 4 KiB (~1,000 for a 4 MB photo), as much as a fifth of
  // the decode. Buffers above kKeepBytes are not kept.
  constexpr size_t kKeepBytes = 16 << 20;
  thread_local std::vector<uint8_t> scan;
  thread_local std::vector<std::vector<uint8_t>> planes;  // likewise the planes (~0.6 MB)
  Decoder d(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), &scan, &planes);
  const bool ok = d.Run(limits, out);
  d.ReturnPlanes();
  if (scan.capacity() > kKeepBytes) std::vector<uint8_t>().swap(scan);
  size_t kept = 0;
  for (auto& p : planes) {
    kept += p.capacity();
    if (kept > kKeepBytes) std::vector<uint8_t>().swap(p);
  }
  return ok;
}

}  // namespace sluice::media
