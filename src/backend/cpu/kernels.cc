// Highway kernels; this file is compiled once per SIMD target (foreach_target.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/kernels.cc"
#include <hwy/foreach_target.h>  // must come before highway.h
// clang-format off
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/kernels.h"
#include "backend/cpu/simd_inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Applies `f(v)` to n floats src -> dst (may alias).
template <class F>
HWY_INLINE void MapRow(const float* src, float* dst, int64_t n, F f) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + nl <= n; i += nl) hn::StoreU(f(hn::LoadU(d, src + i)), d, dst + i);
  if (i < n) StoreTail(f(LoadTail(d, src + i, n - i)), d, dst + i, n - i);
}

void ActRow(float* x, int64_t n, int act) {
  const hn::ScalableTag<float> d;
  MapRow(x, x, n, [&](auto v) { return Act(d, v, static_cast<Activation>(act)); });
}

void GatedRow(const float* gate, const float* up, float* out, int64_t n, int act) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const auto a = static_cast<Activation>(act);
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    hn::StoreU(hn::Mul(Act(d, hn::LoadU(d, gate + i), a), hn::LoadU(d, up + i)), d, out + i);
  }
  if (i < n) {
    auto v = hn::Mul(Act(d, LoadTail(d, gate + i, n - i), a), LoadTail(d, up + i, n - i));
    StoreTail(v, d, out + i, n - i);
  }
}

void AddRow(const float* a, const float* b, float* out, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    hn::StoreU(hn::Add(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, out + i);
  }
  if (i < n) {
    StoreTail(hn::Add(LoadTail(d, a + i, n - i), LoadTail(d, b + i, n - i)), d, out + i, n - i);
  }
}

// Sum of x[0..n) (+ optional sum of squares of x - mean), fixed order per lane.
HWY_INLINE float RowSum(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * nl <= n; i += 2 * nl) {
    s0 = hn::Add(s0, hn::LoadU(d, x + i));
    s1 = hn::Add(s1, hn::LoadU(d, x + i + nl));
  }
  for (; i + nl <= n; i += nl) s0 = hn::Add(s0, hn::LoadU(d, x + i));
  if (i < n) s1 = hn::Add(s1, LoadTail(d, x + i, n - i));
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

HWY_INLINE float RowSumSqDev(const float* x, int64_t n, float mean) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, mean);
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * nl <= n; i += 2 * nl) {
    auto a = hn::Sub(hn::LoadU(d, x + i), vm), b = hn::Sub(hn::LoadU(d, x + i + nl), vm);
    s0 = hn::MulAdd(a, a, s0);
    s1 = hn::MulAdd(b, b, s1);
  }
  for (; i + nl <= n; i += nl) {
    auto a = hn::Sub(hn::LoadU(d, x + i), vm);
    s0 = hn::MulAdd(a, a, s0);
  }
  if (i < n) {
    const int64_t r = n - i;
    auto a = hn::Sub(LoadTail(d, x + i, r), vm);
    a = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(r)), a);
    s1 = hn::MulAdd(a, a, s1);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

// out = (x + r - mean) * rstd * g + b; out may alias x or r.
void LayerNormRow(const float* x, const float* r, const float* g, const float* b, float eps,
                  float* out, int64_t n) {
  if (r) {
    AddRow(x, r, out, n);
  } else if (out != x) {
    std::memcpy(out, x, n * sizeof(float));
  }
  const float mean = RowSum(out, n) / static_cast<float>(n);
  const float var = RowSumSqDev(out, n, mean) / static_cast<float>(n);
  const float rstd = 1.f / std::sqrt(var + eps);
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const auto vm = hn::Set(d, mean), vr = hn::Set(d, rstd);
  auto f = [&](auto v, auto gv, auto bv) {
    return hn::MulAdd(hn::Mul(hn::Sub(v, vm), vr), gv, bv);
  };
  int64_t i = 0;
  for (; i + nl <= n; i += nl) {
    auto bv = b ? hn::LoadU(d, b + i) : hn::Zero(d);
    hn::StoreU(f(hn::LoadU(d, out + i), hn::LoadU(d, g + i), bv), d, out + i);
  }
  if (i < n) {
    const int64_t k = n - i;
    auto bv = b ? LoadTail(d, b + i, k) : hn::Zero(d);
    StoreTail(f(LoadTail(d, out + i, k), LoadTail(d, g + i, k), bv), d, out + i, k);
  }
}

HWY_INLINE float RowSumSq(const float* x, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  auto s0 = hn::Zero(d), s1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * nl <= n; i += 2 * nl) {
    auto a = hn::LoadU(d, x + i), b = hn::LoadU(d, x + i + nl);
    s0 = hn::MulAdd(a, a, s0);
    s1 = hn::MulAdd(b, b, s1);
  }
  for (; i + nl <= n; i += nl) {
    auto a = hn::LoadU(d, x + i);
    s0 = hn::MulAdd(a, a, s0);
  }
  if (i < n) {
    auto a = LoadTail(d, x + i, n - i);
    s1 = hn::MulAdd(a, a, s1);
  }
  return hn::GetLane(hn::SumOfLanes(d, hn::Add(s0, s1)));
}

// res += delta (if delta); out[g] = res[g] * rsqrt(mean(res[g]^2) + eps) * w per group.
void RmsNormRow(float* res, const float* delta, const float* w, float eps, float* out, int64_t n,
                int64_t group) {
  if (delta) AddRow(res, delta, res, n);
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t g0 = 0; g0 < n; g0 += group) {
    const float* x = res + g0;
    float* o = out + g0;
    const float ms = RowSumSq(x, group) / static_cast<float>(group);
    const auto vr = hn::Set(d, 1.f / std::sqrt(ms + eps));
    int64_t i = 0;
    for (; i + nl <= group; i += nl) {
      hn::StoreU(hn::Mul(hn::Mul(hn::LoadU(d, x + i), vr), hn::LoadU(d, w + i)), d, o + i);
    }
    if (i < group) {
      const int64_t k = group - i;
      StoreTail(hn::Mul(hn::Mul(LoadTail(d, x + i, k), vr), LoadTail(d, w + i, k)), d, o + i, k);
    }
  }
}

// NeoX rotation of the first 2*half dims of each head: (x1, x2) -> (x1 c - x2 s, x2 c + x1 s).
void RopeNeoxRow(float* x, const float* cs, const float* sn, int heads, int head_dim, int half) {
  const hn::ScalableTag<float> d;
  const int nl = static_cast<int>(hn::Lanes(d));
  for (int h = 0; h < heads; ++h) {
    float* x1 = x + static_cast<int64_t>(h) * head_dim;
    float* x2 = x1 + half;
    int i = 0;
    for (; i + nl <= half; i += nl) {
      auto a = hn::LoadU(d, x1 + i), b = hn::LoadU(d, x2 + i);
      auto c = hn::LoadU(d, cs + i), s = hn::LoadU(d, sn + i);
      hn::StoreU(hn::Sub(hn::Mul(a, c), hn::Mul(b, s)), d, x1 + i);
      hn::StoreU(hn::Add(hn::Mul(b, c), hn::Mul(a, s)), d, x2 + i);
    }
    for (; i < half; ++i) {
      const float a = x1[i], b = x2[i];
      x1[i] = a * cs[i] - b * sn[i];
      x2[i] = b * cs[i] + a * sn[i];
    }
  }
}

// out (+)= row converted to f32. dtype: 0 f32, 1 bf16, 2 f16.
void EmbedRow(const void* row, int dtype, float* out, int64_t n, bool acc) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  if (dtype == 0) {
    const auto* s = static_cast<const float*>(row);
    if (!acc) {
      std::memcpy(out, s, n * sizeof(float));
      return;
    }
    AddRow(out, s, out, n);
    return;
  }
  if (dtype == 1) {
    const hn::Rebind<hwy::bfloat16_t, decltype(d)> db;
    const auto* s = static_cast<const hwy::bfloat16_t*>(row);
    for (; i + nl <= n; i += nl) {
      auto v = hn::PromoteTo(d, hn::LoadU(db, s + i));
      if (acc) v = hn::Add(v, hn::LoadU(d, out + i));
      hn::StoreU(v, d, out + i);
    }
    const auto* u = static_cast<const uint16_t*>(row);
    for (; i < n; ++i) out[i] = BF16ToF32(u[i]) + (acc ? out[i] : 0.f);
    return;
  }
  const auto* u = static_cast<const uint16_t*>(row);
  for (; i < n; ++i) out[i] = F16ToF32(u[i]) + (acc ? out[i] : 0.f);
}

void WidenRow(const uint16_t* src, float* dst, int64_t n) { WidenBf16Row(src, dst, n); }
void NarrowRow(const float* src, uint16_t* dst, int64_t n) { NarrowBf16Row(src, dst, n); }

// Column-vectorised reduction over `rows` rows (stride ld) for MEAN (mode 1) / MAX (3).
void PoolRows(const float* h, int64_t ld, int64_t rows, int64_t cols, int mode, float* out) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const auto vlen = hn::Set(d, static_cast<float>(rows));
  auto reduce = [&](auto load) {
    auto acc = load(0);
    for (int64_t r = 1; r < rows; ++r)
      acc = mode == 3 ? hn::Max(acc, load(r)) : hn::Add(acc, load(r));
    return mode == 3 ? acc : hn::Div(acc, vlen);
  };
  int64_t c = 0;
  for (; c + nl <= cols; c += nl) {
    hn::StoreU(reduce([&](int64_t r) { return hn::LoadU(d, h + r * ld + c); }), d, out + c);
  }
  if (c < cols) {
    const int64_t k = cols - c;
    StoreTail(reduce([&](int64_t r) { return LoadTail(d, h + r * ld + c, k); }), d, out + c, k);
  }
}

}  // namespace sluice::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>

#include <algorithm>

namespace sluice::cpu {

HWY_EXPORT(ActRow);
HWY_EXPORT(GatedRow);
HWY_EXPORT(AddRow);
HWY_EXPORT(LayerNormRow);
HWY_EXPORT(RmsNormRow);
HWY_EXPORT(RopeNeoxRow);
HWY_EXPORT(EmbedRow);
HWY_EXPORT(PoolRows);
HWY_EXPORT(WidenRow);
HWY_EXPORT(NarrowRow);

namespace {
// Parallelise only when there is enough work to pay for waking the team.
constexpr int64_t kParallelMinElems = 16384;

// Per-thread f32 rows for the bf16 activations (InnerActivationDType): a bf16 row is widened
// into one, computed on in f32 by the f32 row kernels, and rounded back once.
float* RowScratch(int slot, int64_t n) {
  static thread_local std::vector<float> rows[3];
  if (static_cast<int64_t>(rows[slot].size()) < n) rows[slot].resize(n);
  return rows[slot].data();
}
bool Bf16(const Tensor& t) { return t.dtype == DType::kBF16; }
}  // namespace

void WidenRowBf16(const uint16_t* src, float* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(WidenRow)(src, dst, n);
}
void NarrowRowBf16(const float* src, uint16_t* dst, int64_t n) {
  HWY_DYNAMIC_DISPATCH(NarrowRow)(src, dst, n);
}

std::string SimdTargetName() {
  const int64_t targets = hwy::SupportedTargets() & HWY_TARGETS;
  return hwy::TargetName(targets & -targets);
}

void ActivateKernel(const Tensor& x, Activation act) {
  if (act == Activation::kNone) return;
  const int64_t ld = x.row_stride(), n = x.cols;
  float* base = x.ptr<float>();
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMinElems)
  for (int64_t r = 0; r < x.rows; ++r) {
    HWY_DYNAMIC_DISPATCH(ActRow)(base + r * ld, n, static_cast<int>(act));
  }
}

void GatedActivateKernel(const Tensor& gate_up, Activation act, const Tensor& out) {
  const int64_t n = out.cols, ldg = gate_up.row_stride(), ldo = out.row_stride();
  if (Bf16(gate_up) || Bf16(out)) {
#pragma omp parallel for schedule(static) if (out.numel() >= kParallelMinElems)
    for (int64_t r = 0; r < out.rows; ++r) {
      float* g = RowScratch(0, 2 * n);
      float* o = RowScratch(1, n);
      if (Bf16(gate_up)) {
        HWY_DYNAMIC_DISPATCH(WidenRow)(gate_up.ptr<uint16_t>() + r * ldg, g, 2 * n);
      } else {
        std::memcpy(g, gate_up.ptr<float>() + r * ldg, 2 * n * sizeof(float));
      }
      HWY_DYNAMIC_DISPATCH(GatedRow)(g, g + n, o, n, static_cast<int>(act));
      if (Bf16(out)) {
        HWY_DYNAMIC_DISPATCH(NarrowRow)(o, out.ptr<uint16_t>() + r * ldo, n);
      } else {
        std::memcpy(out.ptr<float>() + r * ldo, o, n * sizeof(float));
      }
    }
    return;
  }
  const float* g = gate_up.ptr<float>();
  float* o = out.ptr<float>();
#pragma omp parallel for schedule(static) if (out.numel() >= kParallelMinElems)
  for (int64_t r = 0; r < out.rows; ++r) {
    HWY_DYNAMIC_DISPATCH(GatedRow)
    (g + r * ldg, g + r * ldg + n, o + r * ldo, n, static_cast<int>(act));
  }
}

void AddKernel(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = out.cols, lda = a.row_stride(), ldb = b.row_stride(), ldo = out.row_stride();
#pragma omp parallel for schedule(static) if (out.numel() >= kParallelMinElems)
  for (int64_t r = 0; r < out.rows; ++r) {
    HWY_DYNAMIC_DISPATCH(AddRow)
    (a.ptr<float>() + r * lda, b.ptr<float>() + r * ldb, out.ptr<float>() + r * ldo, n);
  }
}

void LayerNormKernel(const Tensor& x, const Tensor* residual, const Tensor& gamma,
                     const Tensor* beta, float eps, const Tensor& out) {
  const int64_t n = x.cols, ldx = x.row_stride(), ldo = out.row_stride();
  const int64_t ldr = residual ? residual->row_stride() : 0;
  const float* b = beta ? beta->ptr<float>() : nullptr;
#pragma omp parallel for schedule(static) if (x.numel() >= kParallelMinElems)
  for (int64_t r = 0; r < x.rows; ++r) {
    const float* rr = residual ? residual->ptr<float>() + r * ldr : nullptr;
    if (Bf16(out)) {  // f32 statistics and result, rounded once (x and residual f32)
      float* o = RowScratch(0, n);
      HWY_DYNAMIC_DISPATCH(LayerNormRow)
      (x.ptr<float>() + r * ldx, rr, gamma.ptr<float>(), b, eps, o, n);
      HWY_DYNAMIC_DISPATCH(NarrowRow)(o, out.ptr<uint16_t>() + r * ldo, n);
      continue;
    }
    HWY_DYNAMIC_DISPATCH(LayerNormRow)
    (x.ptr<float>() + r * ldx, rr, gamma.ptr<float>(), b, eps, out.ptr<float>() + r * ldo, n);
  }
}

void RmsNormKernel(const Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
                   const Tensor& out, int group) {
  const int64_t n = residual.cols, ldr = residual.row_stride(), ldo = out.row_stride();
  const int64_t g = group > 0 ? group : n;
  const int64_t ldd = delta ? delta->row_stride() : 0;
#pragma omp parallel for schedule(static) if (residual.numel() >= kParallelMinElems)
  for (int64_t r = 0; r < residual.rows; ++r) {
    const float* dr = delta ? delta->ptr<float>() + r * ldd : nullptr;
    HWY_DYNAMIC_DISPATCH(RmsNormRow)
    (residual.ptr<float>() + r * ldr, dr, weight.ptr<float>(), eps, out.ptr<float>() + r * ldo, n,
     g);
  }
}

namespace {
// Rotates one token's row (f32) at position p.positions[t].
void RopeRow(const RopeParams& p, const float* inv_freq, int64_t t, int half, float* row) {
  constexpr int kMaxHalf = 512;
  float cs[kMaxHalf], sn[kMaxHalf];
  const float pos = static_cast<float>(p.positions[t]);
  for (int i = 0; i < half; ++i) {
    const double f = static_cast<double>(pos * inv_freq[i]);  // float32 product, like HF
    cs[i] = static_cast<float>(std::cos(f));
    sn[i] = static_cast<float>(std::sin(f));
  }
  if (p.style == RopeStyle::kNeox) {
    HWY_DYNAMIC_DISPATCH(RopeNeoxRow)(row, cs, sn, p.num_heads, p.head_dim, half);
    return;
  }
  for (int h = 0; h < p.num_heads; ++h) {
    float* xh = row + static_cast<int64_t>(h) * p.head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = xh[2 * i], b = xh[2 * i + 1];
      xh[2 * i] = a * cs[i] - b * sn[i];
      xh[2 * i + 1] = b * cs[i] + a * sn[i];
    }
  }
}
}  // namespace

void RopeKernel(const RopeParams& p) {
  constexpr int kMaxHalf = 512;
  const int rot = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
  const int half = std::min(rot / 2, kMaxHalf);
  const std::vector<float> inv_freq = RopeInverseFrequencies(p);
  const int64_t ld = p.x.row_stride();
  const bool bf16 = Bf16(p.x);  // bf16 rows: rotated in f32, rounded once
#pragma omp parallel for schedule(static) if (p.x.numel() >= kParallelMinElems)
  for (int64_t t = 0; t < p.x.rows; ++t) {
    float* row = bf16 ? RowScratch(0, p.x.cols) : p.x.ptr<float>() + t * ld;
    if (bf16) HWY_DYNAMIC_DISPATCH(WidenRow)(p.x.ptr<uint16_t>() + t * ld, row, p.x.cols);
    RopeRow(p, inv_freq.data(), t, half, row);
    if (bf16) HWY_DYNAMIC_DISPATCH(NarrowRow)(row, p.x.ptr<uint16_t>() + t * ld, p.x.cols);
  }
}

void EmbeddingGatherKernel(const Tensor& table, const int32_t* ids, int64_t n, const Tensor& out,
                           bool accumulate) {
  const int dt = table.dtype == DType::kF32 ? 0 : table.dtype == DType::kBF16 ? 1 : 2;
  const int64_t h = out.cols, ldt = table.row_stride(), ldo = out.row_stride();
  const size_t es = DTypeSize(table.dtype);
  const char* tb = static_cast<const char*>(table.data);
#pragma omp parallel for schedule(static) if (n * h >= kParallelMinElems)
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= table.rows) {  // a caller bug: never read out of bounds
      if (!accumulate) std::memset(out.ptr<float>() + i * ldo, 0, h * sizeof(float));
      continue;
    }
    const void* src = tb + static_cast<int64_t>(ids[i]) * ldt * static_cast<int64_t>(es);
    HWY_DYNAMIC_DISPATCH(EmbedRow)(src, dt, out.ptr<float>() + i * ldo, h, accumulate);
  }
}

void GatherRowsKernel(const Tensor& x, const int32_t* rows, int64_t n, const Tensor& out) {
  const int64_t es = static_cast<int64_t>(DTypeSize(x.dtype));
  const int64_t ldx = x.row_stride() * es, ldo = out.row_stride() * es, bytes = out.cols * es;
  const char* src = static_cast<const char*>(x.data);
  char* dst = static_cast<char*>(out.data);
#pragma omp parallel for schedule(static) if (n * out.cols >= kParallelMinElems)
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * ldo, src + rows[i] * ldx, bytes);
}

void PoolKernel(const PoolParams& p) {
  const int64_t h = p.hidden.cols, ldh = p.hidden.row_stride(), ldo = p.out.row_stride();
  const float* hid = p.hidden.ptr<float>();
#pragma omp parallel for schedule(static) if (p.hidden.numel() >= kParallelMinElems)
  for (int s = 0; s < p.num_seqs; ++s) {
    const int64_t b = p.cu_seqlens[s], len = p.cu_seqlens[s + 1] - b;
    float* o = p.out.ptr<float>() + s * ldo;
    if (len <= 0) {
      std::memset(o, 0, h * sizeof(float));
      continue;
    }
    switch (p.mode) {
      case PoolMode::kCls:
        std::memcpy(o, hid + b * ldh, h * sizeof(float));
        break;
      case PoolMode::kLast:
        std::memcpy(o, hid + (b + len - 1) * ldh, h * sizeof(float));
        break;
      case PoolMode::kMean:
        HWY_DYNAMIC_DISPATCH(PoolRows)(hid + b * ldh, ldh, len, h, 1, o);
        break;
      case PoolMode::kMax:
        HWY_DYNAMIC_DISPATCH(PoolRows)(hid + b * ldh, ldh, len, h, 3, o);
        break;
    }
  }
}

}  // namespace sluice::cpu
#endif
