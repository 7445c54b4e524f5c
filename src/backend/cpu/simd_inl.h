// Per-target SIMD helpers shared by the Highway kernels (include after highway.h, inside
// a HWY_TARGET_INCLUDE'd translation unit). Uses Highway's per-target include guard.
#if defined(SLUICE_BACKEND_CPU_SIMD_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SLUICE_BACKEND_CPU_SIMD_INL_H_
#undef SLUICE_BACKEND_CPU_SIMD_INL_H_
#else
#define SLUICE_BACKEND_CPU_SIMD_INL_H_
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
// clang-format off
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

#include "backend/backend.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kMaxFloatLanes = HWY_MAX_BYTES / sizeof(float);

// Loads n < Lanes(d) floats (rest zero) without reading past p + n.
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* p, int64_t n) {
  alignas(64) float buf[kMaxFloatLanes] = {};
  std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(float));
  return hn::Load(d, buf);
}

// Stores the first n < Lanes(d) lanes of v without writing past p + n.
template <class D>
HWY_INLINE void StoreTail(hn::Vec<D> v, D d, float* p, int64_t n) {
  alignas(64) float buf[kMaxFloatLanes];
  hn::Store(v, d, buf);
  std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(float));
}

// Loads n <= Lanes(d) bf16 values (rest zero) as floats (exact widening), without reading
// past p + n.
template <class D>
HWY_INLINE hn::Vec<D> LoadBf16(D d, const uint16_t* p, int64_t n) {
  const hn::RebindToUnsigned<D> du;
  const hn::Rebind<uint16_t, D> d16;
  hn::Vec<decltype(d16)> h;
  if (n == static_cast<int64_t>(hn::Lanes(d))) {
    h = hn::LoadU(d16, p);
  } else {
    alignas(64) uint16_t buf[kMaxFloatLanes] = {};
    std::memcpy(buf, p, static_cast<size_t>(n) * sizeof(uint16_t));
    h = hn::Load(d16, buf);
  }
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, h)));
}

// Stores the first n <= Lanes(d) lanes of v as bf16, rounded to nearest even with NaN kept
// (F32ToBF16's arithmetic), without writing past p + n.
template <class D>
HWY_INLINE void StoreBf16(hn::Vec<D> v, D d, uint16_t* p, int64_t n) {
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const hn::Rebind<uint16_t, D> d16;
  const auto bits = hn::BitCast(du, v);
  const auto lsb = hn::And(hn::ShiftRight<16>(bits), hn::Set(du, 1u));
  const auto rounded = hn::Add(bits, hn::Add(hn::Set(du, 0x7fffu), lsb));
  const auto nan =
      hn::Gt(hn::BitCast(di, hn::And(bits, hn::Set(du, 0x7fffffffu))), hn::Set(di, 0x7f800000));
  const auto quiet = hn::Or(bits, hn::Set(du, 0x400000u));
  const auto r = hn::ShiftRight<16>(hn::IfThenElse(hn::RebindMask(du, nan), quiet, rounded));
  const auto h = hn::DemoteTo(d16, hn::BitCast(di, r));
  if (n == static_cast<int64_t>(hn::Lanes(d))) {
    hn::StoreU(h, d16, p);
  } else {
    alignas(64) uint16_t buf[kMaxFloatLanes];
    hn::Store(h, d16, buf);
    std::memcpy(p, buf, static_cast<size_t>(n) * sizeof(uint16_t));
  }
}

// dst[0..n) = src[0..n) widened (bf16 -> f32, exact) / rounded (f32 -> bf16: StoreBf16).
HWY_INLINE void WidenBf16Row(const uint16_t* src, float* dst, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < n; i += nl) {
    const int64_t k = std::min(nl, n - i);
    const auto v = LoadBf16(d, src + i, k);
    if (k == nl) {
      hn::StoreU(v, d, dst + i);
    } else {
      StoreTail(v, d, dst + i, k);
    }
  }
}
HWY_INLINE void NarrowBf16Row(const float* src, uint16_t* dst, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t i = 0; i < n; i += nl) {
    const int64_t k = std::min(nl, n - i);
    StoreBf16(k == nl ? hn::LoadU(d, src + i) : LoadTail(d, src + i, k), d, dst + i, k);
  }
}

// erf(x) for float: rational approximation on [-4, 4] (|error| < 5e-7), +-1 outside.
template <class D, class V>
HWY_INLINE V Erf(D d, V x) {
  x = hn::Min(hn::Max(x, hn::Set(d, -4.f)), hn::Set(d, 4.f));
  const V x2 = hn::Mul(x, x);
  V p = hn::Set(d, -2.72614225801306e-10f);
  p = hn::MulAdd(x2, p, hn::Set(d, 2.77068142495902e-08f));
  p = hn::MulAdd(x2, p, hn::Set(d, -2.10102402082508e-06f));
  p = hn::MulAdd(x2, p, hn::Set(d, -5.69250639462346e-05f));
  p = hn::MulAdd(x2, p, hn::Set(d, -7.34990630326855e-04f));
  p = hn::MulAdd(x2, p, hn::Set(d, -2.95459980854025e-03f));
  p = hn::MulAdd(x2, p, hn::Set(d, -1.60960333262415e-02f));
  p = hn::Mul(x, p);
  V q = hn::Set(d, -1.45660718464996e-05f);
  q = hn::MulAdd(x2, q, hn::Set(d, -2.13374055278905e-04f));
  q = hn::MulAdd(x2, q, hn::Set(d, -1.68282697438203e-03f));
  q = hn::MulAdd(x2, q, hn::Set(d, -7.37332916720468e-03f));
  q = hn::MulAdd(x2, q, hn::Set(d, -1.42647390514189e-02f));
  // p / q as p * (1 / q): the approximate reciprocal (rcp14 on AVX-512, 12 bits on AVX2) and
  // one Newton step, within an ulp or two of the division and several times its throughput
  // (a vector division is the slowest instruction of GELU's epilogue on AMX-fast GEMMs).
  const V r0 = hn::ApproximateReciprocal(q);
  const V r = hn::MulAdd(r0, hn::NegMulAdd(q, r0, hn::Set(d, 1.f)), r0);
  return hn::Mul(p, r);
}

template <class D, class V>
HWY_INLINE V Act(D d, V x, Activation act) {
  switch (act) {
    case Activation::kGeluErf: {
      const V e = Erf(d, hn::Mul(x, hn::Set(d, 0.70710678118654752f)));
      return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.f), e));
    }
    case Activation::kGeluTanh: {
      const V x3 = hn::Mul(hn::Mul(x, x), x);
      const V in =
          hn::Mul(hn::Set(d, 0.7978845608028654f), hn::MulAdd(hn::Set(d, 0.044715f), x3, x));
      return hn::Mul(hn::Mul(hn::Set(d, 0.5f), x), hn::Add(hn::Set(d, 1.f), hn::Tanh(d, in)));
    }
    case Activation::kSilu: {
      // exp argument clamped to stay inside Exp's valid range.
      const V e = hn::Exp(d, hn::Min(hn::Neg(x), hn::Set(d, 88.f)));
      return hn::Div(x, hn::Add(hn::Set(d, 1.f), e));
    }
    case Activation::kRelu:
      return hn::Max(x, hn::Zero(d));
    case Activation::kQuickGelu: {
      const V e = hn::Exp(d, hn::Min(hn::Mul(x, hn::Set(d, -1.702f)), hn::Set(d, 88.f)));
      return hn::Div(x, hn::Add(hn::Set(d, 1.f), e));
    }
    case Activation::kNone:
      break;
  }
  return x;
}

}  // namespace sluice::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
