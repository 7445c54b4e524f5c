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
#include "backend/cpu/attention_inl.h"
#include "backend/cpu/simd_inl.h"

HWY_BEFORE_NAMESPACE();
namespace sluice::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The three inner kernels are HWY_NOINLINE on purpose: inlined into AttnTaskRun, GCC 12's
// register allocation spills the accumulators and the kernel runs ~1.5x slower.

// Query rows per micro-kernel call (a "group"): 8 rows x 2 vectors = 16 accumulators, half
// of AVX-512's 32 registers, leaving room for the K/V vectors and the broadcasts.
constexpr int kRows = 8;
static_assert(kSubBlock % kRows == 0, "groups must not straddle sub-blocks");

// Scores S[r][j] = scale * sum_c q_r[c] * Kt[c][j] for kRows query rows and j in [0, nj), nj
// a multiple of Lanes. Kt rows have stride ldk, S rows stride lds. Every score is one FMA
// chain over c = 0..dim-1 in its own lane, so its value does not depend on the block,
// lane or query group that computes it.
HWY_NOINLINE void ScoresGroup(const float* const q[kRows], const float* kt, int64_t ldk, int64_t nj,
                              int dim, float scale, float* s, int64_t lds) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const auto vs = hn::Set(d, scale);
  int64_t j = 0;
  for (; j + 2 * nl <= nj; j += 2 * nl) {
    V acc[kRows][2];
    for (auto& row : acc) row[0] = row[1] = hn::Zero(d);
    for (int c = 0; c < dim; ++c) {
      const float* kr = kt + c * ldk + j;
      const V k0 = hn::LoadU(d, kr), k1 = hn::LoadU(d, kr + nl);
      for (int r = 0; r < kRows; ++r) {
        const V qr = hn::Set(d, q[r][c]);
        acc[r][0] = hn::MulAdd(qr, k0, acc[r][0]);
        acc[r][1] = hn::MulAdd(qr, k1, acc[r][1]);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      hn::StoreU(hn::Mul(acc[r][0], vs), d, s + r * lds + j);
      hn::StoreU(hn::Mul(acc[r][1], vs), d, s + r * lds + j + nl);
    }
  }
  for (; j < nj; j += nl) {
    V acc[kRows];
    for (auto& a : acc) a = hn::Zero(d);
    for (int c = 0; c < dim; ++c) {
      const V k0 = hn::LoadU(d, kt + c * ldk + j);
      for (int r = 0; r < kRows; ++r) acc[r] = hn::MulAdd(hn::Set(d, q[r][c]), k0, acc[r]);
    }
    for (int r = 0; r < kRows; ++r) hn::StoreU(hn::Mul(acc[r], vs), d, s + r * lds + j);
  }
}

// exp(x) for x <= 0 (softmax arguments after the max is subtracted); 0 for x < -87.
// hn::Exp's range reduction and polynomial (about 1 ulp), with a cheaper reconstruction:
// n = round(x / ln 2) lies in [-126, 0], so 2^n is one normal float built from its exponent
// bits. A pure function of x: every lane gets the same value for the same input.
template <class D, class V>
HWY_INLINE V ExpNonPositive(D d, V x) {
  const hn::RebindToSigned<D> di;
  const V lower = hn::Set(d, -87.f);
  const V xc = hn::Max(x, lower);
  const V n = hn::Round(hn::Mul(xc, hn::Set(d, 1.442695040888963407359924681f)));
  V r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), xc);
  r = hn::MulAdd(n, hn::Set(d, -1.428606765330187045e-6f), r);
  V q = hn::Set(d, 0.000198527617612853646278381f);
  q = hn::MulAdd(q, r, hn::Set(d, 0.00139304355252534151077271f));
  q = hn::MulAdd(q, r, hn::Set(d, 0.00833336077630519866943359f));
  q = hn::MulAdd(q, r, hn::Set(d, 0.0416664853692054748535156f));
  q = hn::MulAdd(q, r, hn::Set(d, 0.166666671633720397949219f));
  q = hn::MulAdd(q, r, hn::Set(d, 0.5f));
  const V e = hn::Add(hn::MulAdd(q, hn::Mul(r, r), r), hn::Set(d, 1.f));
  const V scale =
      hn::BitCast(d, hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(di, n), hn::Set(di, 127))));
  return hn::IfThenZeroElse(hn::Lt(x, lower), hn::Mul(e, scale));
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
    const auto e = ExpNonPositive(d, hn::Sub(hn::LoadU(d, s + j), vmx));
    hn::StoreU(e, d, s + j);
    sum = hn::Add(sum, e);
  }
  if (j < n) {
    const int64_t k = n - j;
    auto e = ExpNonPositive(d, hn::Sub(LoadTail(d, s + j, k), vmx));
    e = hn::IfThenElseZero(hn::FirstN(d, static_cast<size_t>(k)), e);
    StoreTail(e, d, s + j, k);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// For r < kRows: out_r[0..dim) = inv[r] * sum_{j < n} p_r[j] * v_j, v_j = v + j * ldv; rows
// p_r have stride ldp. A row's probabilities are zero outside its own key range, and
// fma(0, v, acc) == acc, so each row equals the sum over its own range alone. Every output
// is one FMA chain over j in its own lane, whatever the column blocking.
// Only rows r < nrows are stored.
HWY_NOINLINE void WeightedSumGroup(const float* p, int64_t ldp, int64_t n, const float* v,
                                   int64_t ldv, int dim, const float inv[kRows],
                                   float* const out[kRows], int nrows) {
  const hn::ScalableTag<float> d;
  using V = hn::Vec<decltype(d)>;
  const int nl = static_cast<int>(hn::Lanes(d));
  int c = 0;
  for (; c + 2 * nl <= dim; c += 2 * nl) {
    V acc[kRows][2];
    for (auto& row : acc) row[0] = row[1] = hn::Zero(d);
    for (int64_t j = 0; j < n; ++j) {
      const float* vr = v + j * ldv + c;
      const V v0 = hn::LoadU(d, vr), v1 = hn::LoadU(d, vr + nl);
      for (int r = 0; r < kRows; ++r) {
        const V pj = hn::Set(d, p[r * ldp + j]);
        acc[r][0] = hn::MulAdd(pj, v0, acc[r][0]);
        acc[r][1] = hn::MulAdd(pj, v1, acc[r][1]);
      }
    }
    for (int r = 0; r < nrows; ++r) {
      const V vi = hn::Set(d, inv[r]);
      hn::StoreU(hn::Mul(acc[r][0], vi), d, out[r] + c);
      hn::StoreU(hn::Mul(acc[r][1], vi), d, out[r] + c + nl);
    }
  }
  for (; c < dim; c += nl) {
    const int k = std::min(nl, dim - c);
    V acc[kRows];
    for (auto& a : acc) a = hn::Zero(d);
    for (int64_t j = 0; j < n; ++j) {
      const float* vr = v + j * ldv + c;
      const V vv = k == nl ? hn::LoadU(d, vr) : LoadTail(d, vr, k);
      for (int r = 0; r < kRows; ++r) acc[r] = hn::MulAdd(hn::Set(d, p[r * ldp + j]), vv, acc[r]);
    }
    for (int r = 0; r < nrows; ++r) {
      const V vi = hn::Mul(acc[r], hn::Set(d, inv[r]));
      if (k == nl) {
        hn::StoreU(vi, d, out[r] + c);
      } else {
        StoreTail(vi, d, out[r] + c, k);
      }
    }
  }
}

HWY_INLINE float ToF32(float v) { return v; }
HWY_INLINE float ToF32(uint16_t v) { return BF16ToF32(v); }

// dst[0..n) = src[0..n) as f32.
HWY_INLINE void RowToF32(const float* src, float* dst, int64_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}
HWY_INLINE void RowToF32(const uint16_t* src, float* dst, int64_t n) { WidenBf16Row(src, dst, n); }

// Runs one task on activations of type E (float, or uint16_t: bf16 q/k/v/out, widened into
// the f32 scratch as they are read: K into kt, V into vc, a sub-block's queries into qs; the
// output rows computed into os and rounded once). kt: dim * (nkp + 64) floats, vc: nkp * dim
// floats, s: kSubBlock * nkp floats, qs: kSubBlock * dim, os: kRows * dim (per-thread
// scratch), nkp >= the task's key range rounded up to a whole vector.
template <typename E>
void AttnTaskRunT(const AttentionParams& p, const AttnTask& task, float* kt, float* vc, float* s,
                  float* qs, float* os) {
  constexpr bool kBf16 = sizeof(E) == 2;
  const hn::ScalableTag<float> d;
  const int64_t nl = static_cast<int64_t>(hn::Lanes(d));
  const int dim = p.head_dim;
  const SeqKeys sk = KeysOf(p, task.seq);
  const int base = sk.base, pre = sk.pre, klen = sk.klen;
  const int kvh = task.head / (p.num_heads / p.num_kv_heads);
  const int64_t ldq = p.q.row_stride(), ldk = p.k.row_stride(), ldv = p.v.row_stride();
  const int64_t ldo = p.out.row_stride();
  const E* qb = p.q.ptr<E>() + base * ldq + static_cast<int64_t>(task.head) * dim;
  const E* kb = p.k.ptr<E>() + static_cast<int64_t>(kvh) * dim;
  const E* vb = p.v.ptr<E>() + static_cast<int64_t>(kvh) * dim;
  E* ob = p.out.ptr<E>() + base * ldo + static_cast<int64_t>(task.head) * dim;
  const AttnTask t = TrimRowsWithoutKeys(p, sk, task, ob, ldo);
  if (t.q1 == t.q0) return;

  // Query rows are local (0 .. len - 1); their logical positions start at `pre`.
  int lo, hi, lo_last, hi_last;
  KeyRange(p, pre + t.q0, klen, &lo, &hi);
  KeyRange(p, pre + t.q1 - 1, klen, &lo_last, &hi_last);
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
        const E* kr = kb + sk.Row(static_cast<int>(lo + j)) * ldk;
        for (int c = c0; c < c1; ++c) kt[c * ldt + j] = ToF32(kr[c]);
      }
    }
  }
  for (int c = 0; c < dim; ++c) {
    for (int64_t j = nk; j < nkp; ++j) kt[c * ldt + j] = 0.f;
  }
  // Contiguous copy of the task's V rows: in the fused QKV matrix they are ~1-5 KiB apart
  // and map to few L1 sets, so P V would stream them from L2 once per query group.
  for (int64_t j = 0; j < nk; ++j)
    RowToF32(vb + sk.Row(static_cast<int>(lo + j)) * ldv, vc + j * dim, dim);
  // Query rows in sub-blocks of kSubBlock (S holds kSubBlock rows of stride nkp).
  for (int sb = t.q0; sb < t.q1; sb += kSubBlock) {
    const int se = std::min(t.q1, sb + kSubBlock);
    const int nq = se - sb;
    if constexpr (kBf16) {
      for (int i = sb; i < se; ++i) RowToF32(qb + i * ldq, qs + (i - sb) * dim, dim);
    }
    // Key range [glo, ghi] (offsets from lo) of query group g (rows sb + g .. + kRows - 1).
    auto group_range = [&](int g, int64_t* glo, int64_t* ghi) {
      int a, b, c2, e;
      KeyRange(p, pre + sb + g, klen, &a, &b);
      KeyRange(p, pre + std::min(sb + g + kRows - 1, se - 1), klen, &c2, &e);
      *glo = a - lo;
      *ghi = e - lo;
    };
    int64_t sb_lo, sb_hi, unused;
    group_range(0, &sb_lo, &unused);
    group_range((nq - 1) / kRows * kRows, &unused, &sb_hi);
    // QK^T in key blocks that stay in L1 across all query groups of the sub-block.
    const int64_t jb_size = 2 * nl;
    for (int64_t jb = sb_lo / nl * nl; jb <= sb_hi; jb += jb_size) {
      const int64_t jn = std::min(jb_size, nkp - jb);
      for (int g = 0; g < nq; g += kRows) {
        int64_t glo, ghi;
        group_range(g, &glo, &ghi);
        if (jb > ghi || jb + jn <= glo) continue;  // block outside every row's range
        const float* q[kRows];
        for (int r = 0; r < kRows; ++r) {
          const int i = std::min(sb + g + r, se - 1);
          if constexpr (kBf16) {
            q[r] = qs + (i - sb) * dim;
          } else {
            q[r] = qb + i * ldq;
          }
        }
        ScoresGroup(q, kt + jb, ldt, jn, dim, p.scale, s + g * nkp + jb, nkp);
      }
    }
    // Softmax per row, then P V for kRows rows at a time over the group's key range.
    for (int g = 0; g < nq; g += kRows) {
      int64_t glo, ghi;
      group_range(g, &glo, &ghi);
      const int nrows = std::min(kRows, nq - g);
      float inv[kRows] = {};
      float* out[kRows];
      for (int r = 0; r < kRows; ++r) {
        float* sr = s + (g + r) * nkp;
        if (r >= nrows) {  // padding row: zero probabilities
          std::memset(sr + glo, 0, (ghi - glo + 1) * sizeof(float));
          out[r] = nullptr;
          continue;
        }
        const int i = sb + g + r;
        int rlo, rhi;
        KeyRange(p, pre + i, klen, &rlo, &rhi);
        const int64_t a = rlo - lo, b = rhi - lo;
        inv[r] = 1.f / SoftmaxExp(sr + a, b - a + 1);
        for (int64_t j = glo; j < a; ++j) sr[j] = 0.f;
        for (int64_t j = b + 1; j <= ghi; ++j) sr[j] = 0.f;
        if constexpr (kBf16) {
          out[r] = os + r * dim;
        } else {
          out[r] = ob + i * ldo;
        }
      }
      WeightedSumGroup(s + g * nkp + glo, nkp, ghi - glo + 1, vc + glo * dim, dim, dim, inv, out,
                       nrows);
      if constexpr (kBf16) {
        for (int r = 0; r < nrows; ++r) {
          NarrowBf16Row(os + r * dim, ob + static_cast<int64_t>(sb + g + r) * ldo, dim);
        }
      }
    }
  }
}

void AttnTaskRun(const AttentionParams& p, const AttnTask& task, float* kt, float* vc, float* s,
                 float* qs, float* os) {
  if (p.q.dtype == DType::kBF16) {
    AttnTaskRunT<uint16_t>(p, task, kt, vc, s, qs, os);
  } else {
    AttnTaskRunT<float>(p, task, kt, vc, s, qs, os);
  }
}

}  // namespace sluice::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <omp.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/amx.h"
#include "backend/cpu/cpu_features.h"
#include "backend/cpu/workspace.h"

namespace sluice::cpu {

namespace {
std::atomic<bool> amx_emulation{false};
}  // namespace

void SetAttentionAmxEmulationForTesting(bool on) { amx_emulation.store(on); }

std::string AttentionMode() {
  const char* env = std::getenv("SLUICE_CPU_ATTENTION");
  return env != nullptr && *env != '\0' ? env : "auto";
}

namespace {
// AMX-BF16 and AVX512-BF16 after the ISA cap, and Linux's permission (whatever the mode).
bool AmxAttentionUsable() {
  return Features().amx_bf16 && Features().avx512_bf16 && amx::Available();
}
}  // namespace

bool AmxAttentionAvailable() { return AttentionMode() != "f32" && AmxAttentionUsable(); }

HWY_EXPORT(AttnTaskRun);

void AttentionKernel(const AttentionParams& p) {
  static thread_local std::vector<AttnTask> tasks;  // reused across calls
  tasks.clear();
  int max_len = 0, max_keys = 0;
  int64_t pairs = 0;
  for (int s = 0; s < p.num_seqs; ++s) {
    const SeqKeys k = KeysOf(p, s);
    max_len = std::max(max_len, k.len);
    max_keys = std::max(max_keys, k.klen);
    pairs += k.len > 0 ? p.num_heads : 0;
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
  const int64_t ntasks = static_cast<int64_t>(tasks.size());
  const AttnTask* task = tasks.data();  // `tasks` is thread_local: pass its data explicitly
  // bf16 products on AMX for whole sequences (encoders, scoring, shared prefixes), not for
  // the paged KV cache of generation: decode rows (one per sequence) fill 1/16 of a tile and
  // that path was not measured against f32.
  const bool bf16_io = p.q.dtype == DType::kBF16;
  if ((p.products == DType::kBF16 || bf16_io) && !p.paged() &&
      p.head_dim <= amx_attention::kMaxHeadDim) {
    const bool forced_f32 = AttentionMode() == "f32";  // one getenv per call
    const bool emu =
        !forced_f32 && amx_emulation.load(std::memory_order_relaxed) && RawFeatures().avx512_bf16;
    if (emu || (!forced_f32 && AmxAttentionUsable())) {
      const int64_t dp = amx_attention::Bf16PaddedDim(p.head_dim);
      const int64_t nkp = amx_attention::Bf16PaddedKeys(max_keys);
#pragma omp parallel
      {
        static thread_local Workspace ws_kp, ws_vp, ws_s, ws_pb, ws_qb;
        const amx_attention::Bf16AttnScratch ws{
            ws_kp.Get<uint16_t>(nkp * dp), ws_vp.Get<uint16_t>(nkp * dp),
            ws_s.Get<float>(kSubBlock * nkp), ws_pb.Get<uint16_t>(kSubBlock * nkp),
            ws_qb.Get<uint16_t>(kSubBlock * dp)};
#pragma omp for schedule(dynamic, 1)
        for (int64_t i = 0; i < ntasks; ++i) {
          if (emu) {
            amx_attention::RunTaskEmu(p, task[i], ws);
          } else {
            amx_attention::RunTaskHw(p, task[i], ws);
          }
        }
      }
      return;
    }
  }
  // A task's key range spans at most max_keys keys; pad to whole vectors (<= 64 lanes).
  const int64_t nkp = (static_cast<int64_t>(max_keys) + 63) / 64 * 64;
  const int64_t kt_elems = (nkp + 64) * p.head_dim, s_elems = kSubBlock * nkp;
#pragma omp parallel
  {
    static thread_local Workspace ws_kt, ws_v, ws_s, ws_q, ws_o;
    float* kt = ws_kt.Get<float>(kt_elems);
    float* vc = ws_v.Get<float>(nkp * p.head_dim);
    float* s = ws_s.Get<float>(s_elems);
    float* qs = bf16_io ? ws_q.Get<float>(kSubBlock * p.head_dim) : nullptr;
    float* os = bf16_io ? ws_o.Get<float>(kSubBlock * p.head_dim) : nullptr;
#pragma omp for schedule(dynamic, 1)
    for (int64_t i = 0; i < ntasks; ++i) {
      HWY_DYNAMIC_DISPATCH(AttnTaskRun)(p, task[i], kt, vc, s, qs, os);
    }
  }
}

}  // namespace sluice::cpu
#endif  // HWY_ONCE
