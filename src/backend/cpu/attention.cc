// Highway attention kernel; compiled once per SIMD target (foreach_target.h).
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "backend/cpu/attention.cc"
#include <hwy/foreach_target.h>  // must come before highway.h
// clang-format off
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/cpu/attention.h"
#include "backend/cpu/simd_inl.h"

#ifndef SLUICE_BACKEND_CPU_ATTENTION_TASK_
#define SLUICE_BACKEND_CPU_ATTENTION_TASK_
namespace sluice::cpu {
// One unit of work: query rows [q0, q1) of head `head` of sequence `seq`.
struct AttnTask {
  int seq, head, q0, q1;
};
// Allowed key range [lo, hi] of query i in a sequence of length len (see attention.h).
inline void KeyRange(const AttentionParams& p, int i, int len, int* lo, int* hi) {
  *lo = p.window > 0 ? std::max(0, i - p.window + 1) : 0;
  if (p.causal) {
    *hi = i;
  } else {
    *hi = p.window > 0 ? std::min(len - 1, i + p.window - 1) : len - 1;
  }
}
}  // namespace sluice::cpu
#endif

HWY_BEFORE_NAMESPACE();
namespace sluice::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Scores S[r][j] = scale * sum_d q_r[d] * Kt[d][j] for 4 query rows and j in [0, nkp).
// Every lane is an independent FMA chain over d = 0..D-1, so a score's value does not
// depend on which block or lane computes it.
HWY_INLINE void Scores4(const float* const q[4], const float* kt, int64_t nkp, int dim, float scale,
                        float* s) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, scale);
  int64_t j = 0;
  for (; j + 2 * nl <= nkp; j += 2 * nl) {
    auto a00 = hn::Zero(d), a01 = hn::Zero(d), a10 = hn::Zero(d), a11 = hn::Zero(d);
    auto a20 = hn::Zero(d), a21 = hn::Zero(d), a30 = hn::Zero(d), a31 = hn::Zero(d);
    for (int c = 0; c < dim; ++c) {
      const float* kr = kt + c * nkp + j;
      const auto k0 = hn::LoadU(d, kr), k1 = hn::LoadU(d, kr + nl);
      const auto q0 = hn::Set(d, q[0][c]), q1 = hn::Set(d, q[1][c]);
      const auto q2 = hn::Set(d, q[2][c]), q3 = hn::Set(d, q[3][c]);
      a00 = hn::MulAdd(q0, k0, a00);
      a01 = hn::MulAdd(q0, k1, a01);
      a10 = hn::MulAdd(q1, k0, a10);
      a11 = hn::MulAdd(q1, k1, a11);
      a20 = hn::MulAdd(q2, k0, a20);
      a21 = hn::MulAdd(q2, k1, a21);
      a30 = hn::MulAdd(q3, k0, a30);
      a31 = hn::MulAdd(q3, k1, a31);
    }
    hn::StoreU(hn::Mul(a00, vs), d, s + j);
    hn::StoreU(hn::Mul(a01, vs), d, s + j + nl);
    hn::StoreU(hn::Mul(a10, vs), d, s + nkp + j);
    hn::StoreU(hn::Mul(a11, vs), d, s + nkp + j + nl);
    hn::StoreU(hn::Mul(a20, vs), d, s + 2 * nkp + j);
    hn::StoreU(hn::Mul(a21, vs), d, s + 2 * nkp + j + nl);
    hn::StoreU(hn::Mul(a30, vs), d, s + 3 * nkp + j);
    hn::StoreU(hn::Mul(a31, vs), d, s + 3 * nkp + j + nl);
  }
  for (; j < nkp; j += nl) {  // nkp is a multiple of nl
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (int c = 0; c < dim; ++c) {
      const auto k0 = hn::LoadU(d, kt + c * nkp + j);
      a0 = hn::MulAdd(hn::Set(d, q[0][c]), k0, a0);
      a1 = hn::MulAdd(hn::Set(d, q[1][c]), k0, a1);
      a2 = hn::MulAdd(hn::Set(d, q[2][c]), k0, a2);
      a3 = hn::MulAdd(hn::Set(d, q[3][c]), k0, a3);
    }
    hn::StoreU(hn::Mul(a0, vs), d, s + j);
    hn::StoreU(hn::Mul(a1, vs), d, s + nkp + j);
    hn::StoreU(hn::Mul(a2, vs), d, s + 2 * nkp + j);
    hn::StoreU(hn::Mul(a3, vs), d, s + 3 * nkp + j);
  }
}

// In place: s[0..n) -> exp(s - max); returns the sum (fixed order for a given n).
HWY_INLINE float SoftmaxExp(float* s, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  float mx = s[0];
  int64_t j = 0;
  if (n >= nl) {
    auto vm = hn::LoadU(d, s);
    for (j = nl; j + nl <= n; j += nl) vm = hn::Max(vm, hn::LoadU(d, s + j));
    mx = hn::GetLane(hn::MaxOfLanes(d, vm));
  }
  for (; j < n; ++j) mx = std::max(mx, s[j]);
  const auto vmx = hn::Set(d, mx);
  auto sum = hn::Zero(d);
  for (j = 0; j + nl <= n; j += nl) {
    const auto e = hn::Exp(d, hn::Sub(hn::LoadU(d, s + j), vmx));
    hn::StoreU(e, d, s + j);
    sum = hn::Add(sum, e);
  }
  if (j < n) {
    const int64_t k = n - j;
    auto e = hn::Exp(d, hn::Sub(LoadTail(d, s + j, k), vmx));
    e = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(k)), e);
    StoreTail(e, d, s + j, k);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// out[0..dim) = (sum_j p[j] * v_j) * inv, v_j = v + j * ldv.
HWY_INLINE void WeightedSum(const float* p, int64_t n, const float* v, int64_t ldv, int dim,
                            float inv, float* out) {
  const hn::ScalableTag<float> d;
  const int nl = static_cast<int>(hn::Lanes(d));
  const auto vi = hn::Set(d, inv);
  int c = 0;
  for (; c + 4 * nl <= dim; c += 4 * nl) {
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (int64_t j = 0; j < n; ++j) {
      const float* vr = v + j * ldv + c;
      const auto pj = hn::Set(d, p[j]);
      a0 = hn::MulAdd(pj, hn::LoadU(d, vr), a0);
      a1 = hn::MulAdd(pj, hn::LoadU(d, vr + nl), a1);
      a2 = hn::MulAdd(pj, hn::LoadU(d, vr + 2 * nl), a2);
      a3 = hn::MulAdd(pj, hn::LoadU(d, vr + 3 * nl), a3);
    }
    hn::StoreU(hn::Mul(a0, vi), d, out + c);
    hn::StoreU(hn::Mul(a1, vi), d, out + c + nl);
    hn::StoreU(hn::Mul(a2, vi), d, out + c + 2 * nl);
    hn::StoreU(hn::Mul(a3, vi), d, out + c + 3 * nl);
  }
  for (; c < dim; c += nl) {
    const int k = std::min(nl, dim - c);
    auto a0 = hn::Zero(d);
    for (int64_t j = 0; j < n; ++j) {
      const float* vr = v + j * ldv + c;
      const auto vv = k == nl ? hn::LoadU(d, vr) : LoadTail(d, vr, k);
      a0 = hn::MulAdd(hn::Set(d, p[j]), vv, a0);
    }
    if (k == nl) {
      hn::StoreU(hn::Mul(a0, vi), d, out + c);
    } else {
      StoreTail(hn::Mul(a0, vi), d, out + c, k);
    }
  }
}

// Runs one task. kt_buf / s_buf are per-thread scratch of the sizes asked by the caller.
void AttnTaskRun(const AttentionParams& p, const AttnTask& t, float* kt, float* s) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const int dim = p.head_dim;
  const int base = p.cu_seqlens[t.seq];
  const int len = p.cu_seqlens[t.seq + 1] - base;
  const int kvh = t.head / (p.num_heads / p.num_kv_heads);
  const int64_t ldq = p.q.row_stride(), ldk = p.k.row_stride(), ldv = p.v.row_stride();
  const int64_t ldo = p.out.row_stride();
  const float* qb = p.q.ptr<float>() + base * ldq + static_cast<int64_t>(t.head) * dim;
  const float* kb = p.k.ptr<float>() + base * ldk + static_cast<int64_t>(kvh) * dim;
  const float* vb = p.v.ptr<float>() + base * ldv + static_cast<int64_t>(kvh) * dim;
  float* ob = p.out.ptr<float>() + base * ldo + static_cast<int64_t>(t.head) * dim;

  int lo, hi, lo_last, hi_last;
  KeyRange(p, t.q0, len, &lo, &hi);
  KeyRange(p, t.q1 - 1, len, &lo_last, &hi_last);
  const int64_t nk = hi_last - lo + 1;
  const int64_t nkp = (nk + nl - 1) / nl * nl;
  // Kt[c][j] = K[lo + j][c], zero padded to nkp columns.
  for (int c = 0; c < dim; ++c) {
    float* row = kt + c * nkp;
    for (int64_t j = 0; j < nk; ++j) row[j] = kb[(lo + j) * ldk + c];
    for (int64_t j = nk; j < nkp; ++j) row[j] = 0.f;
  }
  for (int i0 = t.q0; i0 < t.q1; i0 += 4) {
    const float* q[4];
    for (int r = 0; r < 4; ++r) q[r] = qb + std::min(i0 + r, t.q1 - 1) * ldq;
    Scores4(q, kt, nkp, dim, p.scale, s);
    for (int r = 0; r < 4 && i0 + r < t.q1; ++r) {
      const int i = i0 + r;
      int rlo, rhi;
      KeyRange(p, i, len, &rlo, &rhi);
      float* sr = s + r * nkp + (rlo - lo);
      const int64_t n = rhi - rlo + 1;
      const float sum = SoftmaxExp(sr, n);
      WeightedSum(sr, n, vb + rlo * ldv, ldv, dim, 1.f / sum, ob + i * ldo);
    }
  }
}

}  // namespace sluice::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>

#include <vector>

#include "backend/cpu/workspace.h"

namespace sluice::cpu {

HWY_EXPORT(AttnTaskRun);

namespace {
constexpr int kQueryBlock = 64;
}  // namespace

void AttentionKernel(const AttentionParams& p) {
  static thread_local std::vector<AttnTask> tasks;  // reused across calls
  tasks.clear();
  int max_len = 0;
  for (int s = 0; s < p.num_seqs; ++s) {
    const int len = p.cu_seqlens[s + 1] - p.cu_seqlens[s];
    max_len = std::max(max_len, len);
    for (int h = 0; h < p.num_heads; ++h) {
      for (int q0 = 0; q0 < len; q0 += kQueryBlock) {
        tasks.push_back({s, h, q0, std::min(len, q0 + kQueryBlock)});
      }
    }
  }
  if (tasks.empty()) return;
  // Key range of a task spans at most max_len keys; pad to a whole vector (<= 64 lanes).
  const int64_t nkp = (static_cast<int64_t>(max_len) + 64) / 64 * 64;
  const int64_t kt_elems = nkp * p.head_dim, s_elems = 4 * nkp;
  const int64_t ntasks = static_cast<int64_t>(tasks.size());
  const AttnTask* task = tasks.data();  // `tasks` is thread_local: pass its data explicitly
#pragma omp parallel
  {
    static thread_local Workspace ws_kt, ws_s;
    float* kt = ws_kt.Get<float>(kt_elems);
    float* s = ws_s.Get<float>(s_elems);
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < ntasks; ++i) HWY_DYNAMIC_DISPATCH(AttnTaskRun)(p, task[i], kt, s);
  }
}

}  // namespace sluice::cpu
#endif  // HWY_ONCE
