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
// Query rows whose scores are held at once (S is kSubBlock x keys per thread).
constexpr int kSubBlock = 64;
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

// The three inner kernels are HWY_NOINLINE on purpose: inlined into AttnTaskRun, GCC 12's
// register allocation spills the accumulators and the kernel runs ~1.5x slower.

// Scores S[r][j] = scale * sum_c q_r[c] * Kt[c][j] for 4 query rows and j in [0, nj), nj a
// multiple of Lanes. Kt rows have stride ldk, S rows stride lds. Every score is one FMA
// chain over c = 0..dim-1 in its own lane, so its value does not depend on the block,
// lane or query group that computes it.
HWY_NOINLINE void Scores4(const float* const q[4], const float* kt, int64_t ldk, int64_t nj, int dim,
                        float scale, float* s, int64_t lds) {
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, scale);
  int64_t j = 0;
  for (; j + 2 * nl <= nj; j += 2 * nl) {
    auto a00 = hn::Zero(d), a01 = hn::Zero(d), a10 = hn::Zero(d), a11 = hn::Zero(d);
    auto a20 = hn::Zero(d), a21 = hn::Zero(d), a30 = hn::Zero(d), a31 = hn::Zero(d);
    for (int c = 0; c < dim; ++c) {
      const float* kr = kt + c * ldk + j;
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
    hn::StoreU(hn::Mul(a10, vs), d, s + lds + j);
    hn::StoreU(hn::Mul(a11, vs), d, s + lds + j + nl);
    hn::StoreU(hn::Mul(a20, vs), d, s + 2 * lds + j);
    hn::StoreU(hn::Mul(a21, vs), d, s + 2 * lds + j + nl);
    hn::StoreU(hn::Mul(a30, vs), d, s + 3 * lds + j);
    hn::StoreU(hn::Mul(a31, vs), d, s + 3 * lds + j + nl);
  }
  for (; j < nj; j += nl) {
    auto a0 = hn::Zero(d), a1 = hn::Zero(d), a2 = hn::Zero(d), a3 = hn::Zero(d);
    for (int c = 0; c < dim; ++c) {
      const auto k0 = hn::LoadU(d, kt + c * ldk + j);
      a0 = hn::MulAdd(hn::Set(d, q[0][c]), k0, a0);
      a1 = hn::MulAdd(hn::Set(d, q[1][c]), k0, a1);
      a2 = hn::MulAdd(hn::Set(d, q[2][c]), k0, a2);
      a3 = hn::MulAdd(hn::Set(d, q[3][c]), k0, a3);
    }
    hn::StoreU(hn::Mul(a0, vs), d, s + j);
    hn::StoreU(hn::Mul(a1, vs), d, s + lds + j);
    hn::StoreU(hn::Mul(a2, vs), d, s + 2 * lds + j);
    hn::StoreU(hn::Mul(a3, vs), d, s + 3 * lds + j);
  }
}

// In place: s[0..n) -> exp(s - max); returns the sum (fixed order for a given n).
HWY_NOINLINE float SoftmaxExp(float* s, int64_t n) {
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

// For r < 4: out_r[0..dim) = inv[r] * sum_{j < n} p_r[j] * v_j, v_j = v + j * ldv; rows
// p_r have stride ldp. A row's probabilities are zero outside its own key range, and
// fma(0, v, acc) == acc, so each row equals the sum over its own range alone.
// Only rows r < nrows are stored.
HWY_NOINLINE void WeightedSum4(const float* p, int64_t ldp, int64_t n, const float* v, int64_t ldv,
                             int dim, const float inv[4], float* const out[4], int nrows) {
  const hn::ScalableTag<float> d;
  const int nl = static_cast<int>(hn::Lanes(d));
  int c = 0;
  for (; c + 4 * nl <= dim; c += 4 * nl) {
    hn::Vec<decltype(d)> acc[4][4];
    for (auto& row : acc) {
      for (auto& a : row) a = hn::Zero(d);
    }
    for (int64_t j = 0; j < n; ++j) {
      const float* vr = v + j * ldv + c;
      const auto v0 = hn::LoadU(d, vr), v1 = hn::LoadU(d, vr + nl);
      const auto v2 = hn::LoadU(d, vr + 2 * nl), v3 = hn::LoadU(d, vr + 3 * nl);
      for (int r = 0; r < 4; ++r) {
        const auto pj = hn::Set(d, p[r * ldp + j]);
        acc[r][0] = hn::MulAdd(pj, v0, acc[r][0]);
        acc[r][1] = hn::MulAdd(pj, v1, acc[r][1]);
        acc[r][2] = hn::MulAdd(pj, v2, acc[r][2]);
        acc[r][3] = hn::MulAdd(pj, v3, acc[r][3]);
      }
    }
    for (int r = 0; r < nrows; ++r) {
      const auto vi = hn::Set(d, inv[r]);
      for (int u = 0; u < 4; ++u) hn::StoreU(hn::Mul(acc[r][u], vi), d, out[r] + c + u * nl);
    }
  }
  for (; c < dim; c += nl) {
    const int k = std::min(nl, dim - c);
    hn::Vec<decltype(d)> acc[4] = {hn::Zero(d), hn::Zero(d), hn::Zero(d), hn::Zero(d)};
    for (int64_t j = 0; j < n; ++j) {
      const float* vr = v + j * ldv + c;
      const auto vv = k == nl ? hn::LoadU(d, vr) : LoadTail(d, vr, k);
      for (int r = 0; r < 4; ++r) acc[r] = hn::MulAdd(hn::Set(d, p[r * ldp + j]), vv, acc[r]);
    }
    for (int r = 0; r < nrows; ++r) {
      const auto vi = hn::Mul(acc[r], hn::Set(d, inv[r]));
      if (k == nl) {
        hn::StoreU(vi, d, out[r] + c);
      } else {
        StoreTail(vi, d, out[r] + c, k);
      }
    }
  }
}

// Runs one task. kt: dim * (nkp + 64) floats, s: kSubBlock * nkp floats (per-thread
// scratch), nkp >= the task's key range rounded up to a whole vector.
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
  // Kt row stride: one extra vector so that rows do not alias in the L1 sets.
  const int64_t ldt = nkp + nl;
  // Kt[c][j] = K[lo + j][c], zero padded to nkp columns; 16 x 16 tiles stay in L1.
  constexpr int kTile = 16;
  for (int64_t j0 = 0; j0 < nk; j0 += kTile) {
    const int64_t j1 = std::min<int64_t>(nk, j0 + kTile);
    for (int c0 = 0; c0 < dim; c0 += kTile) {
      const int c1 = std::min(dim, c0 + kTile);
      for (int64_t j = j0; j < j1; ++j) {
        const float* kr = kb + (lo + j) * ldk;
        for (int c = c0; c < c1; ++c) kt[c * ldt + j] = kr[c];
      }
    }
  }
  for (int c = 0; c < dim; ++c) {
    for (int64_t j = nk; j < nkp; ++j) kt[c * ldt + j] = 0.f;
  }
  // Query rows in sub-blocks of kSubBlock (S holds kSubBlock rows of stride nkp).
  for (int sb = t.q0; sb < t.q1; sb += kSubBlock) {
    const int se = std::min(t.q1, sb + kSubBlock);
    const int nq = se - sb;
    // Key range [glo, ghi] (offsets from lo) of query group g (rows sb + g .. + 3).
    auto group_range = [&](int g, int64_t* glo, int64_t* ghi) {
      int a, b, c2, e;
      KeyRange(p, sb + g, len, &a, &b);
      KeyRange(p, std::min(sb + g + 3, se - 1), len, &c2, &e);
      *glo = a - lo;
      *ghi = e - lo;
    };
    int64_t sb_lo, sb_hi, unused;
    group_range(0, &sb_lo, &unused);
    group_range((nq - 1) / 4 * 4, &unused, &sb_hi);
    // QK^T in key blocks that stay in L1 across all query groups of the sub-block.
    const int64_t jb_size = 2 * nl;
    for (int64_t jb = sb_lo / nl * nl; jb <= sb_hi; jb += jb_size) {
      const int64_t jn = std::min(jb_size, nkp - jb);
      for (int g = 0; g < nq; g += 4) {
        int64_t glo, ghi;
        group_range(g, &glo, &ghi);
        if (jb > ghi || jb + jn <= glo) continue;  // block outside every row's range
        const float* q[4];
        for (int r = 0; r < 4; ++r) q[r] = qb + std::min(sb + g + r, se - 1) * ldq;
        Scores4(q, kt + jb, ldt, jn, dim, p.scale, s + g * nkp + jb, nkp);
      }
    }
    // Softmax per row, then P V for 4 rows at a time over the group's key range.
    for (int g = 0; g < nq; g += 4) {
      int64_t glo, ghi;
      group_range(g, &glo, &ghi);
      const int nrows = std::min(4, nq - g);
      float inv[4] = {0.f, 0.f, 0.f, 0.f};
      float* out[4];
      for (int r = 0; r < 4; ++r) {
        float* sr = s + (g + r) * nkp;
        if (r >= nrows) {  // padding row: zero probabilities
          std::memset(sr + glo, 0, (ghi - glo + 1) * sizeof(float));
          out[r] = nullptr;
          continue;
        }
        const int i = sb + g + r;
        int rlo, rhi;
        KeyRange(p, i, len, &rlo, &rhi);
        const int64_t a = rlo - lo, b = rhi - lo;
        inv[r] = 1.f / SoftmaxExp(sr + a, b - a + 1);
        for (int64_t j = glo; j < a; ++j) sr[j] = 0.f;
        for (int64_t j = b + 1; j <= ghi; ++j) sr[j] = 0.f;
        out[r] = ob + i * ldo;
      }
      WeightedSum4(s + g * nkp + glo, nkp, ghi - glo + 1, vb + (lo + glo) * ldv, ldv, dim, inv, out,
                   nrows);
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

void AttentionKernel(const AttentionParams& p) {
  static thread_local std::vector<AttnTask> tasks;  // reused across calls
  tasks.clear();
  int max_len = 0;
  int64_t pairs = 0;
  for (int s = 0; s < p.num_seqs; ++s) {
    const int len = p.cu_seqlens[s + 1] - p.cu_seqlens[s];
    max_len = std::max(max_len, len);
    pairs += len > 0 ? p.num_heads : 0;
  }
  // One task per (sequence, head) transposes K once for all its queries; with too few such
  // pairs to keep the threads busy, split sequences into kSubBlock-row tasks. Results do not
  // depend on this choice (every row is computed by the same operations either way).
  const int span = pairs >= 4 * omp_get_max_threads() ? std::max(1, max_len) : kSubBlock;
  for (int s = 0; s < p.num_seqs; ++s) {
    const int len = p.cu_seqlens[s + 1] - p.cu_seqlens[s];
    for (int h = 0; h < p.num_heads; ++h) {
      for (int q0 = 0; q0 < len; q0 += span) tasks.push_back({s, h, q0, std::min(len, q0 + span)});
    }
  }
  if (tasks.empty()) return;
  // A task's key range spans at most max_len keys; pad to whole vectors (<= 64 lanes).
  const int64_t nkp = (static_cast<int64_t>(max_len) + 63) / 64 * 64;
  const int64_t kt_elems = (nkp + 64) * p.head_dim, s_elems = kSubBlock * nkp;
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
