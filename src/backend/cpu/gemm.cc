// Batch-invariant GEMM (see gemm.h); this file is compiled once per SIMD target.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/gemm.cc"
#include <hwy/foreach_target.h>  // must come before highway.h
// clang-format off
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "backend/cpu/gemm.h"
#include "backend/cpu/simd_inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::cpu::gemm::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using DF = hn::CappedTag<float, kPanel>;
constexpr size_t kLanes = hn::MaxLanes(DF());
constexpr int kVecs = static_cast<int>(kPanel / kLanes);  // vectors per panel row
// Rows per micro-tile: accumulators (kRows * kVecs) + kVecs weight vectors + a broadcast
// must fit the register file (16 on AVX2, 32 on AVX-512).
constexpr int kRows = kVecs == 1 ? 12 : kVecs == 2 ? 6 : kVecs == 4 ? 3 : 1;

template <bool kBf16>
HWY_INLINE hn::Vec<DF> LoadW(const void* p, int64_t off) {
  const DF d;
  if constexpr (kBf16) {
    const hn::Rebind<uint16_t, DF> d16;
    const hn::Rebind<uint32_t, DF> d32;
    const auto w = hn::LoadU(d16, static_cast<const uint16_t*>(p) + off);
    return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(d32, w)));
  } else {
    return hn::LoadU(d, static_cast<const float*>(p) + off);
  }
}

// One micro-tile: MR rows x one panel (kPanel columns, `cols` of them real).
template <int MR, bool kBf16>
HWY_NOINLINE void Tile(const float* x, int64_t ldx, int64_t k, const void* panel, float* out,
                       int64_t ldo, int64_t cols, const float* bias, Activation act, bool sum) {
  const DF d;
  using V = hn::Vec<DF>;
  V acc[MR][kVecs];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < kVecs; ++v) acc[r][v] = hn::Zero(d);
  }
  for (int64_t kk = 0; kk < k; ++kk) {
    V w[kVecs];
    for (int v = 0; v < kVecs; ++v) w[v] = LoadW<kBf16>(panel, kk * kPanel + v * kLanes);
    for (int r = 0; r < MR; ++r) {
      const V a = hn::Set(d, x[r * ldx + kk]);
      for (int v = 0; v < kVecs; ++v) acc[r][v] = hn::MulAdd(a, w[v], acc[r][v]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    float* o = out + r * ldo;
    for (int v = 0; v < kVecs; ++v) {
      const int64_t c0 = v * static_cast<int64_t>(kLanes);
      if (c0 >= cols) break;
      V y = acc[r][v];
      if (bias) y = hn::Add(y, hn::LoadU(d, bias + c0));
      y = sluice::cpu::HWY_NAMESPACE::Act(d, y, act);
      const int64_t valid = cols - c0;
      if (valid >= static_cast<int64_t>(kLanes)) {
        if (sum) y = hn::Add(y, hn::LoadU(d, o + c0));
        hn::StoreU(y, d, o + c0);
      } else {
        if (sum) y = hn::Add(y, sluice::cpu::HWY_NAMESPACE::LoadTail(d, o + c0, valid));
        sluice::cpu::HWY_NAMESPACE::StoreTail(y, d, o + c0, valid);
      }
    }
  }
}

using TileFn = void (*)(const float*, int64_t, int64_t, const void*, float*, int64_t, int64_t,
                        const float*, Activation, bool);

template <bool kBf16, int... I>
constexpr auto MakeTable(std::integer_sequence<int, I...>) {
  return std::array<TileFn, sizeof...(I)>{&Tile<I + 1, kBf16>...};
}

void RunImpl(const Args& a) {
  static constexpr auto kF32 = MakeTable<false>(std::make_integer_sequence<int, kRows>());
  static constexpr auto kB16 = MakeTable<true>(std::make_integer_sequence<int, kRows>());
  const auto& table = a.bf16 ? kB16 : kF32;
  const int64_t panels = Panels(a.n);
  const int64_t groups = (a.m + kRows - 1) / kRows;
  const int64_t panel_elems = a.k * kPanel;
  const size_t welem = a.bf16 ? sizeof(uint16_t) : sizeof(float);
  // A tile = up to gb row groups x pb panels; the weight block (pb panels) stays in L2
  // while the tile's rows stream over it.
  const int64_t gb = std::max<int64_t>(1, 48 / kRows);
  const int64_t tiles_m = (groups + gb - 1) / gb;
  const int64_t pb =
      BlocksPerTile(panels, (256 << 10) / (panel_elems * static_cast<int64_t>(welem)), tiles_m,
                    omp_get_max_threads());
  const int64_t tiles_n = (panels + pb - 1) / pb;
  const bool parallel = a.m * a.n * a.k >= (1 << 16) && tiles_m * tiles_n > 1;
#pragma omp parallel for collapse(2) schedule(static) if (parallel)
  for (int64_t tm = 0; tm < tiles_m; ++tm) {
    for (int64_t tn = 0; tn < tiles_n; ++tn) {
      const int64_t p_end = std::min(panels, (tn + 1) * pb);
      const int64_t g_end = std::min(groups, (tm + 1) * gb);
      for (int64_t p = tn * pb; p < p_end; ++p) {
        const void* panel = static_cast<const char*>(a.packed) + p * panel_elems * welem;
        const int64_t c0 = p * kPanel;
        const int64_t cols = std::min<int64_t>(kPanel, a.n - c0);
        const float* bias = a.bias ? a.bias + c0 : nullptr;
        for (int64_t g = tm * gb; g < g_end; ++g) {
          const int64_t r0 = g * kRows;
          const int64_t rows = std::min<int64_t>(kRows, a.m - r0);
          table[rows - 1](a.x + r0 * a.ldx, a.ldx, a.k, panel, a.out + r0 * a.ldo + c0, a.ldo, cols,
                          bias, a.act, a.sum);
        }
      }
    }
  }
}

int RowsPerTileImpl() { return kRows; }

// One element vector of the epilogue (valid lanes from column c of row r; full: all lanes).
// kInt / kAct / kOut16 are the call's constants: each combination is its own loop, with no
// per-vector dispatch (the activation's switch and the accumulator type folded away).
template <bool kInt, Activation kAct, bool kOut16, bool kFull, class D>
HWY_INLINE void EpilogueVec(D d, const EpilogueArgs& e, int64_t r, int64_t c, int64_t valid,
                            hn::Vec<D> rs) {
  using V = hn::Vec<D>;
  auto load = [&](const float* p) {
    if constexpr (kFull) {
      return hn::LoadU(d, p);
    } else {
      return sluice::cpu::HWY_NAMESPACE::LoadTail(d, p, valid);
    }
  };
  V y;
  if constexpr (kInt) {
    // The integer sums minus 128 * column sum, in uint32 (wrap-around, as the kernels),
    // then to f32: what the int8 kernels' own conversion loops computed.
    const hn::RebindToSigned<D> di;
    const hn::RebindToUnsigned<D> du;
    const int32_t* ia = e.iacc + r * e.ldacc + c;
    hn::Vec<decltype(di)> s, cs;
    if constexpr (kFull) {
      s = hn::LoadU(di, ia);
      cs = hn::LoadU(di, e.colsum + c);
    } else {
      alignas(64) int32_t bs[sluice::cpu::HWY_NAMESPACE::kMaxFloatLanes] = {};
      alignas(64) int32_t bc[sluice::cpu::HWY_NAMESPACE::kMaxFloatLanes] = {};
      std::memcpy(bs, ia, static_cast<size_t>(valid) * sizeof(int32_t));
      std::memcpy(bc, e.colsum + c, static_cast<size_t>(valid) * sizeof(int32_t));
      s = hn::Load(di, bs);
      cs = hn::Load(di, bc);
    }
    const auto v = hn::Sub(hn::BitCast(du, s), hn::ShiftLeft<7>(hn::BitCast(du, cs)));
    y = hn::ConvertTo(d, hn::BitCast(di, v));
  } else {
    y = load(e.acc + r * e.ldacc + c);
  }
  if (e.col_scale) y = hn::Mul(y, hn::Mul(rs, load(e.col_scale + c)));
  if (e.bias) y = hn::Add(y, load(e.bias + c));
  y = sluice::cpu::HWY_NAMESPACE::Act(d, y, kAct);
  if constexpr (kOut16) {
    uint16_t* o16 = e.out16 + r * e.ldo + c;
    if (e.sum) y = hn::Add(y, sluice::cpu::HWY_NAMESPACE::LoadBf16(d, o16, valid));
    sluice::cpu::HWY_NAMESPACE::StoreBf16(y, d, o16, valid);
  } else {
    float* o = e.out + r * e.ldo + c;
    if (e.sum) y = hn::Add(y, load(o));
    if constexpr (kFull) {
      hn::StoreU(y, d, o);
    } else {
      sluice::cpu::HWY_NAMESPACE::StoreTail(y, d, o, valid);
    }
  }
}

template <bool kInt, Activation kAct, bool kOut16>
void EpilogueLoop(const EpilogueArgs& e) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = e.cols / lanes * lanes;
  for (int64_t r = 0; r < e.rows; ++r) {
    const auto rs = hn::Set(d, e.row_scale ? e.row_scale[r] : 1.f);
    for (int64_t c = 0; c < full; c += lanes) {
      EpilogueVec<kInt, kAct, kOut16, true>(d, e, r, c, lanes, rs);
    }
    if (full < e.cols) EpilogueVec<kInt, kAct, kOut16, false>(d, e, r, full, e.cols - full, rs);
  }
}

template <bool kInt, bool kOut16>
void EpilogueByAct(const EpilogueArgs& e) {
  switch (e.act) {
    case Activation::kNone:
      return EpilogueLoop<kInt, Activation::kNone, kOut16>(e);
    case Activation::kGeluErf:
      return EpilogueLoop<kInt, Activation::kGeluErf, kOut16>(e);
    case Activation::kGeluTanh:
      return EpilogueLoop<kInt, Activation::kGeluTanh, kOut16>(e);
    case Activation::kSilu:
      return EpilogueLoop<kInt, Activation::kSilu, kOut16>(e);
    case Activation::kRelu:
      return EpilogueLoop<kInt, Activation::kRelu, kOut16>(e);
    case Activation::kQuickGelu:
      return EpilogueLoop<kInt, Activation::kQuickGelu, kOut16>(e);
  }
}

void EpilogueImpl(const EpilogueArgs& e) {
  const bool out16 = e.out16 != nullptr;
  if (e.iacc != nullptr) {
    out16 ? EpilogueByAct<true, true>(e) : EpilogueByAct<true, false>(e);
  } else {
    out16 ? EpilogueByAct<false, true>(e) : EpilogueByAct<false, false>(e);
  }
}

}  // namespace sluice::cpu::gemm::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace sluice::cpu::gemm {

HWY_EXPORT(RunImpl);
HWY_EXPORT(RowsPerTileImpl);
HWY_EXPORT(EpilogueImpl);

void Epilogue(const EpilogueArgs& e) { HWY_DYNAMIC_DISPATCH(EpilogueImpl)(e); }

void Run(const Args& a) {
  if (a.m <= 0 || a.n <= 0) return;
  HWY_DYNAMIC_DISPATCH(RunImpl)(a);
}

int RowsPerTile() { return HWY_DYNAMIC_DISPATCH(RowsPerTileImpl)(); }

template <typename T, typename F>
void Pack(const float* w, int64_t n, int64_t k, T* packed, F convert) {
  const int64_t panels = Panels(n);
#pragma omp parallel for schedule(static) if (n * k >= (1 << 20))
  for (int64_t p = 0; p < panels; ++p) {
    T* dst = packed + p * k * kPanel;
    for (int64_t j = 0; j < kPanel; ++j) {
      const int64_t col = p * kPanel + j;
      for (int64_t kk = 0; kk < k; ++kk) {
        dst[kk * kPanel + j] = col < n ? convert(w[col * k + kk]) : convert(0.f);
      }
    }
  }
}

void PackF32(const float* w, int64_t n, int64_t k, float* packed) {
  Pack(w, n, k, packed, [](float v) { return v; });
}
void PackBF16(const float* w, int64_t n, int64_t k, uint16_t* packed) {
  Pack(w, n, k, packed, [](float v) { return F32ToBF16(v); });
}

}  // namespace sluice::cpu::gemm
#endif  // HWY_ONCE
