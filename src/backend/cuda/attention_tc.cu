// Variable-length attention on tensor cores (bf16/f16), the kernel behind Attention() for
// head_dim 32, 64 and 128 (attention.cu dispatches; the CUDA-core kernels there serve the
// rest).
//
// AttentionTcKernel: bf16/f16 q/k/v with head_dim 32, 64 or 128 on tensor cores
// (mma.sync m16n8k16, fp32 accumulation), FlashAttention-2 style: a block of 4 warps owns
// 64 query rows of one (sequence, head) -- or 8 warps the same rows of the two query heads
// of a GQA pair, which share the K/V tiles --, each warp 16 rows; K/V tiles (32 keys for
// head_dim 128, else 64) are double-buffered in shared memory with cp.async (one barrier per
// tile). Q stays in shared memory and its fragments are re-read with ldmatrix per k-step,
// which leaves registers for the K fragments of every 8-key block of a k-step: the blocks'
// Q·K^T accumulations interleave instead of running as one dependent mma chain each. S and
// the online softmax stay in registers, P is rounded to the input dtype for P·V (as
// FlashAttention does), O is normalised once at the end and rounded once. A row's running
// maximum only moves when a tile exceeds it by more than 2^8 (kRescaleLog2), so O is
// rescaled on few tiles instead of every one. Per warp, 8-key blocks past its causal limit
// are skipped and tiles no row needs to mask skip the mask. Tiles start at the sequence's
// first token and all reductions have a fixed order: batch invariant like the others.
// Shared-prefix reuse reads keys in the same logical order as attention.cu's kernels.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/kernels.h"

namespace sluice::cuda {
namespace {

// Two floats -> two 16-bit values in one register (first in the low half).
template <typename T>
__device__ __forceinline__ uint32_t Pack2(float lo, float hi) {
  uint32_t r;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    r = *reinterpret_cast<uint32_t*>(&v);
  } else {
    __half2 v = __floats2half2_rn(lo, hi);
    r = *reinterpret_cast<uint32_t*>(&v);
  }
  return r;
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem, bool valid) {
  const auto s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: no global read, the 16 bytes are zero-filled
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Rescale threshold of AttentionTcKernel's running maximum (log2 domain): P <= 2^8.
constexpr float kRescaleLog2 = 8.f;

constexpr int kTcWarps = 4;
constexpr int kTcQ = 16 * kTcWarps;  // query rows per block and head

template <typename T>
__device__ __forceinline__ void Mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* smem) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* smem) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// NST pipeline stages of one K tile and one V tile of KT keys each, then the HPB Q tiles
// (kTcQ rows each).
template <int D, int KT, int HPB, int NST>
constexpr size_t TcSmemBytes() {
  return sizeof(uint16_t) * static_cast<size_t>(2 * NST * KT + HPB * kTcQ) * (D + 8);
}

// S = Q·K^T for the first NB 8-key blocks of a K tile (16 query rows of one warp; qw: the
// warp's Q rows in shared memory, ks: the K tile), blocks past NB left untouched. Blocks go
// in groups of up to 4: per pair of k-steps the Q fragments and the K fragments of the
// group's blocks are loaded first, then the group's independent accumulations interleave
// (no branch inside, so the loads of the next step can be scheduled ahead).
template <typename T, int KNB, int NB, int KKS, int KST>
__device__ __forceinline__ void ScoreTile(float (&s)[KNB][4], const T* qw, const T* ks, int lane) {
  constexpr int kGroup = NB < 4 ? NB : 4;
  static_assert(NB % kGroup == 0, "key blocks per group");
  const int mi = lane >> 3, r8 = lane & 7;
  const T* qa = qw + ((mi & 1) * 8 + r8) * KST + (mi >> 1) * 8;  // A: rows, k halves
  const T* kb = ks + r8 * KST + (mi >> 1) * 16 + (mi & 1) * 8;   // B: two k-steps
#pragma unroll
  for (int j = 0; j < NB; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
  for (int j0 = 0; j0 < NB; j0 += kGroup) {
#pragma unroll
    for (int kk = 0; kk < KKS; kk += 2) {
      uint32_t a0[4], a1[4], b[kGroup][4];
      LdMatrixX4(a0, qa + kk * 16);
      LdMatrixX4(a1, qa + (kk + 1) * 16);
#pragma unroll
      for (int j = 0; j < kGroup; ++j) LdMatrixX4(b[j], kb + (j0 + j) * 8 * KST + kk * 16);
#pragma unroll
      for (int j = 0; j < kGroup; ++j) Mma16816<T>(s[j0 + j], a0, b[j][0], b[j][1]);
#pragma unroll
      for (int j = 0; j < kGroup; ++j) Mma16816<T>(s[j0 + j], a1, b[j][2], b[j][3]);
    }
  }
}

// KT: keys per K/V tile; MINB: blocks per SM the registers are budgeted for; HPB: query
// heads per block (heads that share a KV head: they share its K/V tiles, 4 warps each);
// NST: pipeline stages (the copies of NST - 1 tiles are in flight while one is computed).
// One block's work: query block `qblock` (kTcQ rows) of sequence `seq`, for the HPB heads of
// blockIdx.y. AttentionTcKernel takes (seq, qblock) from the grid, AttentionTcGraphKernel
// from the device arrays (a grid fixed per recording).
template <typename T, int D, int KT, int HPB, int NST>
__device__ __forceinline__ void AttentionTcBlock(const T* __restrict__ q, int64_t ldq,
                                                 const T* __restrict__ k, int64_t ldk,
                                                 const T* __restrict__ v, int64_t ldv,
                                                 T* __restrict__ out, int64_t ldo,
                                                 const int32_t* __restrict__ cu, int group,
                                                 float scale_log2, bool causal, int window,
                                                 const KeySource& src, int seq, int qblock) {
  constexpr int kSt = D + 8;      // padded shared-memory row (elements): conflict-free
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  constexpr int kKs = D / 16;     // k-steps of Q·K^T
  constexpr int kDt = D / 8;      // 8-column output tiles
  constexpr int kNb = KT / 8;     // 8-key blocks per tile
  extern __shared__ uint4 tc_smem[];
  T* const smem_t = reinterpret_cast<T*>(tc_smem);
  // Stage st's K (kv = 0) or V (kv = 1) buffer, [KT][kSt].
  auto buf = [smem_t](int st, int kv) { return smem_t + (2 * st + kv) * KT * kSt; };
  // Grid: x = query block, y = group of HPB heads, z = sequence (from seq0): the blocks of
  // one sequence run together, so its K/V (shared by its query blocks and GQA heads) and Q
  // come from DRAM once and are re-read from L2. Warps 4i..4i+3 serve head h0 + i.
  const int h0 = blockIdx.y * HPB, kvh = h0 / group;
  const int base = cu[seq], len = cu[seq + 1] - base;
  // Keys in logical order: the prefix sequence's rows (or cached keys), then the sequence's
  // own; query rows are local (0..len) and sit at logical positions pre + local.
  const SeqKeys sk = KeysOf(src, cu, seq);
  const int pre = sk.pre, klen = KeyLimit(src, seq, pre + len);  // cut at the key limit
  const int64_t pbase = sk.pbase;
  const int q0 = qblock * kTcQ;
  if (q0 >= len) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane >> 2, t = lane & 3;
  const int h = h0 + warp / kTcWarps;  // this warp's head

  KeyRange keys = VisibleKeys(pre, len, q0, kTcQ, causal, window, KT);
  keys.end = min(keys.end, klen);  // a key limit (rows left with no key: zeros)

  // Asynchronous copy of the K/V tile starting at key t0 into stage st (rows past the
  // sequence's end are zero-filled).
  // Every thread copies the same 16-byte column chunk of KT / kRowStep rows per tile (the block
  // size is a multiple of the chunks per row), so the per-tile address work is one row
  // index and two 64-bit multiply-adds per row.
  constexpr int kBlk = kTcWarps * 32 * HPB, kRowStep = kBlk / kChunks;
  static_assert(kBlk % kChunks == 0 && KT % kRowStep == 0, "K/V tile copy layout");
  const int cr0 = threadIdx.x / kChunks, cc = (threadIdx.x % kChunks) * 8;
  // Logical key kl's row: the prefix's row pbase + kl below pre, else the sequence's own
  // base + kl - pre (row indices fit in int: batches are far below 2^31 tokens).
  const T* const kcol = k + static_cast<int64_t>(kvh) * D + cc;
  const T* const vcol = v + static_cast<int64_t>(kvh) * D + cc;
  const int own_off = base - pre, pre_off = static_cast<int>(pbase);
  auto load_kv = [&](int t0, int st) {
    T* const kd = buf(st, 0) + cr0 * kSt + cc;
    T* const vd = buf(st, 1) + cr0 * kSt + cc;
#pragma unroll
    for (int i = 0; i < KT / kRowStep; ++i) {
      const int kl = t0 + cr0 + i * kRowStep;
      const bool ok = kl < klen;
      // Past the end: any valid row (the copy is zero-filled). Paged: a cache row found
      // through the block table (uniform branch per block).
      const int64_t r = !ok                    ? (sk.blocks != nullptr ? 0 : base)
                        : sk.blocks != nullptr ? sk.Row(kl)
                                               : kl + (kl >= pre ? own_off : pre_off);
      CpAsync16(kd + i * kRowStep * kSt, kcol + r * ldk, ok);
      CpAsync16(vd + i * kRowStep * kSt, vcol + r * ldv, ok);
    }
  };
  // The Q tiles after the stages, head i's kTcQ rows at row i * kTcQ. One copy group for
  // Q, then one per K/V tile (empty past the last), so group counts are uniform.
  T* const qs = smem_t + 2 * NST * KT * kSt;
  {
    // Rows cr0 + i * kRowStep of the HPB heads' tiles (kTcQ is a multiple of kRowStep and
    // cr0 < kRowStep, so an iteration's head is a constant).
    static_assert(kTcQ % kRowStep == 0, "Q tile copy layout");
    const T* const qsrc =
        q + static_cast<int64_t>(base + q0) * ldq + static_cast<int64_t>(h0) * D + cc;
#pragma unroll
    for (int i = 0; i < HPB * kTcQ / kRowStep; ++i) {
      const int qh = i * kRowStep / kTcQ, qr = cr0 + (i * kRowStep) % kTcQ;
      const bool ok = q0 + qr < len;
      CpAsync16(qs + (qh * kTcQ + qr) * kSt + cc, qsrc + (ok ? qr * ldq : 0) + qh * D, ok);
    }
    CpAsyncCommit();
#pragma unroll
    for (int i = 0; i < NST - 1; ++i) {
      if (keys.begin + i * KT < keys.end) load_kv(keys.begin + i * KT, i);
      CpAsyncCommit();
    }
    CpAsyncWait<NST - 1>();  // Q has landed
    __syncthreads();
  }
  const int wq0 = q0 + (warp % kTcWarps) * 16;  // this warp's first query row (in-sequence)
  const bool active = wq0 < len;                // warp-uniform
  // Q stays in shared memory: its fragments are re-read with ldmatrix per k-step, which
  // leaves the registers for the K fragments of all key blocks of a k-step, so the Q·K^T
  // chains of the key blocks interleave instead of running one after another.
  const T* const qw = qs + warp * 16 * kSt;
  float o[kDt][4];
#pragma unroll
  for (int i = 0; i < kDt; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  const int row[2] = {pre + wq0 + g, pre + wq0 + g + 8};  // logical query positions
  const int wl = pre + wq0;                               // the warp's first logical query position
  // ldmatrix lane roles: matrix mi (of 4), row r8 within it.
  const int mi = lane >> 3, r8 = lane & 7;

  int st = 0;  // the stage of tile t0
  for (int t0 = keys.begin; t0 < keys.end; t0 += KT, st = st + 1 == NST ? 0 : st + 1) {
    CpAsyncWait<NST - 2>();  // tile t0 has landed (the NST - 2 after it may not have)
    // Tile t0 is visible to every thread, and every warp is done with the previous tile,
    // whose stage is refilled now with the tile NST - 1 ahead.
    __syncthreads();
    {
      const int ahead = t0 + (NST - 1) * KT;
      if (ahead < keys.end) load_kv(ahead, st == 0 ? NST - 1 : st - 1);
      CpAsyncCommit();
    }
    const T* ks = buf(st, 0);
    const T* vs = buf(st, 1);
    do {  // this warp's work on the tile (break = nothing to do)
      if (!active) break;
      if (causal && t0 > wl + 15) break;  // every key of the tile is in this warp's future
      if (window > 0 && (t0 + KT - 1 < wl - window + 1 || (!causal && t0 > wl + 15 + window))) {
        break;  // the tile is outside every row's window
      }
      // Key blocks of 8 past this warp's last visible key (its last row's causal limit, the
      // sequence's end) are masked for all 16 rows: their Q·K^T, exponentials and P·V are
      // skipped (they would contribute exact zeros). nb is warp-uniform.
      const int kvis = causal ? min(klen, wl + 16) : klen;
      const int nb = min(kNb, (kvis - t0 + 7) / 8);
      // No key of the tile needs a mask for any row of the warp (the common case before
      // the diagonal): scale only.
      const bool full = window == 0 && t0 + KT <= klen && (!causal || t0 + KT - 1 <= wl);
      float s[kNb][4];
      // nb <= kNb / 2 (the causal diagonal tile of every other warp): half the key blocks.
      if (nb > kNb / 2) {
        ScoreTile<T, kNb, kNb, kKs, kSt>(s, qw, ks, lane);
      } else {
        ScoreTile<T, kNb, kNb / 2, kKs, kSt>(s, qw, ks, lane);
      }
#pragma unroll
      for (int j = 0; j < kNb; ++j) {
        if (j >= nb) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
      }
      // Mask and scale (log2 domain), row maxima over the tile.
      float mx[2] = {-INFINITY, -INFINITY};
      if (full) {
#pragma unroll
        for (int j = 0; j < kNb; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            s[j][e] *= scale_log2;
            mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
          }
        }
      } else {
#pragma unroll
        for (int j = 0; j < kNb; ++j) {
          if (j >= nb) continue;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = t0 + j * 8 + 2 * t + (e & 1);
            const int qi = row[e >> 1];
            bool ok = key < klen;
            if (causal) ok = ok && key <= qi;
            if (window > 0) ok = ok && abs(qi - key) < window;
            s[j][e] = ok ? s[j][e] * scale_log2 : -INFINITY;
            mx[e >> 1] = fmaxf(mx[e >> 1], s[j][e]);
          }
        }
      }
      // A row's running maximum m moves only when its tile maximum exceeds it by more than
      // kRescaleLog2 (or m is still -inf): P = exp2(s - m) then stays below 2^kRescaleLog2,
      // and O and l are rescaled only on the tiles where some row of the warp moved (rarely
      // after the first tile) instead of on every tile. O / l is unchanged (both use the same
      // m); only roundings differ. The decision is per row (rows that did not move get a
      // factor of exactly 1), so a row's arithmetic never depends on the other rows of its
      // warp: shared-prefix reuse stays bit-identical to the full computation.
      float msub[2], corr[2];
      bool moved = false;
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        corr[r] = 1.f;
        if (mx[r] > m[r] + kRescaleLog2) {
          const float m_new = fmaxf(m[r], mx[r]);
          // On the row's first visible tile (m = -inf) O and l are still exactly 0: nothing
          // to rescale.
          if (m[r] != -INFINITY) {
            corr[r] = exp2f(m[r] - m_new);
            l[r] *= corr[r];
            moved = true;
          }
          m[r] = m_new;
        }
      }
      if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
        for (int i = 0; i < kDt; ++i) {
          o[i][0] *= corr[0];
          o[i][1] *= corr[0];
          o[i][2] *= corr[1];
          o[i][3] *= corr[1];
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) msub[r] = m[r] == -INFINITY ? 0.f : m[r];
      float ps[2] = {0.f, 0.f};
#pragma unroll
      for (int j = 0; j < kNb; ++j) {
        if (j >= nb) continue;  // stays 0: P of masked keys
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[j][e] = exp2f(s[j][e] - msub[e >> 1]);
          ps[e >> 1] += s[j][e];
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) l[r] += ps[r];
        // O += P·V, 16 keys per step; P comes straight from the S accumulators.
#pragma unroll
      for (int kk = 0; kk < KT / 16; ++kk) {
        if (2 * kk >= nb) continue;  // all 16 keys masked
        uint32_t a[4];
        a[0] = Pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        a[1] = Pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        a[2] = Pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        a[3] = Pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
        const T* vrow = vs + (kk * 16 + r8 + (mi & 1) * 8) * kSt + (mi >> 1) * 8;
#pragma unroll
        for (int dp = 0; dp < D / 16; ++dp) {
          uint32_t b[4];
          LdMatrixX4Trans(b, vrow + dp * 16);
          Mma16816<T>(o[2 * dp], a, b[0], b[1]);
          Mma16816<T>(o[2 * dp + 1], a, b[2], b[3]);
        }
      }
    } while (false);
  }
  if (!active) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int local = row[r] - pre;
    if (local >= len) continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    T* orow = out + static_cast<int64_t>(base + local) * ldo + static_cast<int64_t>(h) * D + 2 * t;
#pragma unroll
    for (int i = 0; i < kDt; ++i) {
      *reinterpret_cast<uint32_t*>(orow + i * 8) =
          Pack2<T>(o[i][2 * r] * inv, o[i][2 * r + 1] * inv);
    }
  }
}

template <typename T, int D, int KT, int MINB, int HPB, int NST>
__global__ void __launch_bounds__(kTcWarps * 32 * HPB, MINB)
    AttentionTcKernel(const T* __restrict__ q, int64_t ldq, const T* __restrict__ k, int64_t ldk,
                      const T* __restrict__ v, int64_t ldv, T* __restrict__ out, int64_t ldo,
                      const int32_t* __restrict__ cu, int group, float scale_log2, bool causal,
                      int window, KeySource src, int seq0) {
  AttentionTcBlock<T, D, KT, HPB, NST>(q, ldq, k, ldk, v, ldv, out, ldo, cu, group, scale_log2,
                                       causal, window, src, seq0 + static_cast<int>(blockIdx.z),
                                       static_cast<int>(blockIdx.x));
}

// The query blocks of a batch in order (sequence by sequence, kTcQ rows each), numbered
// 0, 1, ...: block `vb`'s sequence and its query block within it, found from cu_seqlens
// (cap + 1 entries, those after the batch's sequences equal to its token count) by warp 0;
// seq = -1 past the batch's last block. Lanes take 32 sequences at a time: their block
// counts, an inclusive prefix sum by shuffles, the lane whose range holds vb. The scan stops
// at the first chunk that ends at the token count (every sequence after it is empty).
__device__ __forceinline__ void FindQueryBlock(const int32_t* __restrict__ cu, int cap, int vb,
                                               int lane, int* seq, int* qblock) {
  const int total = cu[cap];
  int before = 0;  // query blocks of the chunks already scanned
  for (int s0 = 0; s0 < cap; s0 += 32) {
    const int s = s0 + lane;
    const int len = s < cap ? cu[s + 1] - cu[s] : 0;
    const int blocks = (len + kTcQ - 1) / kTcQ;
    int incl = blocks;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += y;
    }
    const bool mine = blocks > 0 && before + incl - blocks <= vb && vb < before + incl;
    const unsigned hit = __ballot_sync(0xffffffffu, mine);
    if (hit != 0) {
      const int l = __ffs(hit) - 1;
      const int start = __shfl_sync(0xffffffffu, before + incl - blocks, l);
      *seq = s0 + l;
      *qblock = vb - start;
      return;
    }
    before += __shfl_sync(0xffffffffu, incl, 31);
    const int last = min(s0 + 32, cap);
    if (cu[last] == total) break;  // the sequences after this chunk are empty
  }
  *seq = -1;
  *qblock = 0;
}

// The graph form: a grid of gridDim.x blocks per head group, fixed by the recording, whose
// block b takes the batch's query blocks b, b + gridDim.x, ... (FindQueryBlock). Each query
// block is computed exactly as AttentionTcKernel computes it: the same bits.
template <typename T, int D, int KT, int MINB, int HPB, int NST>
__global__ void __launch_bounds__(kTcWarps * 32 * HPB, MINB)
    AttentionTcGraphKernel(const T* __restrict__ q, int64_t ldq, const T* __restrict__ k,
                           int64_t ldk, const T* __restrict__ v, int64_t ldv, T* __restrict__ out,
                           int64_t ldo, const int32_t* __restrict__ cu, int group, float scale_log2,
                           bool causal, int window, KeySource src, int cap) {
  __shared__ int where[2];
  for (int vb = static_cast<int>(blockIdx.x);; vb += static_cast<int>(gridDim.x)) {
    __syncthreads();  // the previous query block is done with shared memory and `where`
    if (threadIdx.x < 32) {
      int seq, qblock;
      FindQueryBlock(cu, cap, vb, static_cast<int>(threadIdx.x), &seq, &qblock);
      if (threadIdx.x == 0) {
        where[0] = seq;
        where[1] = qblock;
      }
    }
    __syncthreads();
    const int seq = where[0], qblock = where[1];
    if (seq < 0) return;
    AttentionTcBlock<T, D, KT, HPB, NST>(q, ldq, k, ldk, v, ldv, out, ldo, cu, group, scale_log2,
                                         causal, window, src, seq, qblock);
  }
}

template <typename T, int D, int KT, int MINB, int HPB, int NST>
bool LaunchTcVariant(const AttentionParams& p, cudaStream_t stream, bool graph) {
  constexpr size_t kSmem = TcSmemBytes<D, KT, HPB, NST>();
  if (graph) {
    static const bool raised_graph =
        kSmem <= 48 * 1024 || cudaFuncSetAttribute(AttentionTcGraphKernel<T, D, KT, MINB, HPB, NST>,
                                                   cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   static_cast<int>(kSmem)) == cudaSuccess;
    if (!raised_graph) return false;
    // Twice the query blocks of one sequence filling the capacity's tokens: a batch of a
    // few sequences runs in one round, many short ones loop.
    const int blocks = 2 * ((static_cast<int>(p.q.rows) + kTcQ - 1) / kTcQ);
    const dim3 grid(static_cast<unsigned>(std::max(blocks, 1)),
                    static_cast<unsigned>(p.num_heads / HPB), 1);
    AttentionTcGraphKernel<T, D, KT, MINB, HPB, NST><<<grid, kTcWarps * 32 * HPB, kSmem, stream>>>(
        p.q.ptr<T>(), p.q.row_stride(), p.k.ptr<T>(), p.k.row_stride(), p.v.ptr<T>(),
        p.v.row_stride(), p.out.ptr<T>(), p.out.row_stride(), p.cu_seqlens,
        p.num_heads / p.num_kv_heads, p.scale * 1.4426950408889634f, p.causal, p.window,
        KeySourceOf(p), p.seq_capacity);
    const cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
      std::fprintf(stderr, "sluice cuda: attention launch failed: %s\n", cudaGetErrorString(e));
      std::abort();
    }
    return true;
  }
  static const bool raised =
      kSmem <= 48 * 1024 || cudaFuncSetAttribute(AttentionTcKernel<T, D, KT, MINB, HPB, NST>,
                                                 cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                 static_cast<int>(kSmem)) == cudaSuccess;
  if (!raised) return false;
  constexpr int kMaxZ = 65535;  // grid z limit: sequences beyond it in further launches
  for (int s0 = 0; s0 < p.num_seqs; s0 += kMaxZ) {
    const dim3 grid(static_cast<unsigned>((p.max_seqlen + kTcQ - 1) / kTcQ),
                    static_cast<unsigned>(p.num_heads / HPB),
                    static_cast<unsigned>(std::min(kMaxZ, p.num_seqs - s0)));
    AttentionTcKernel<T, D, KT, MINB, HPB, NST><<<grid, kTcWarps * 32 * HPB, kSmem, stream>>>(
        p.q.ptr<T>(), p.q.row_stride(), p.k.ptr<T>(), p.k.row_stride(), p.v.ptr<T>(),
        p.v.row_stride(), p.out.ptr<T>(), p.out.row_stride(), p.cu_seqlens,
        p.num_heads / p.num_kv_heads, p.scale * 1.4426950408889634f, p.causal, p.window,
        KeySourceOf(p), s0);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "sluice cuda: attention launch failed: %s\n", cudaGetErrorString(e));
    std::abort();
  }
  return true;
}

// head_dim 128: 32-key tiles and registers budgeted for 16 resident warps per SM (128
// registers): the kernel is latency bound on short sequences and gains from the extra
// resident warps (0.32 -> 0.29 ms for a Qwen3-0.6B layer's 35,845 tokens on an H200).
// Smaller heads use 64-key tiles. GQA with an even number of query heads per KV head: the
// two query heads of a pair share one block (8 warps) and its K/V tiles, which halves the
// K/V traffic from L2 (+1.3% end to end on the Qwen3-0.6B-shaped reranker: 3,990 -> 4,045
// pairs/s, docs/cuda.md). Two pipeline stages: 3 and 4 measured the same (4,050 / 4,042).
template <typename T, int D>
bool LaunchTc(const AttentionParams& p, cudaStream_t stream, bool graph) {
  constexpr int kKt = D == 128 ? 32 : 64;
  if ((p.num_heads / p.num_kv_heads) % 2 == 0) {
    return LaunchTcVariant<T, D, kKt, 2, 2, 2>(p, stream, graph);
  }
  // One head per block: registers for 4 blocks (16 warps) per SM at every head_dim (the
  // interleaved Q·K^T of 64-key tiles would otherwise take 168 registers at head_dim 64).
  return LaunchTcVariant<T, D, kKt, 4, 1, 2>(p, stream, graph);
}

bool LaunchAny(const AttentionParams& p, cudaStream_t stream, bool graph) {
  const auto launch = [&](auto tag) {
    using T = decltype(tag);
    switch (p.head_dim) {
      case 32:
        return LaunchTc<T, 32>(p, stream, graph);
      case 64:
        return LaunchTc<T, 64>(p, stream, graph);
      default:
        return LaunchTc<T, 128>(p, stream, graph);
    }
  };
  return p.q.dtype == DType::kBF16 ? launch(__nv_bfloat16{}) : launch(__half{});
}

}  // namespace

bool AttentionTcEligible(const AttentionParams& p) {
  if (p.head_dim != 32 && p.head_dim != 64 && p.head_dim != 128) return false;
  const auto al16 = [](const Tensor& x) {
    return reinterpret_cast<uintptr_t>(x.data) % 16 == 0 && x.row_stride() % 8 == 0;
  };
  return al16(p.q) && al16(p.k) && al16(p.v) && reinterpret_cast<uintptr_t>(p.out.data) % 4 == 0 &&
         p.out.row_stride() % 2 == 0;
}

bool AttentionTc(const AttentionParams& p, cudaStream_t stream) {
  return LaunchAny(p, stream, false);
}

bool AttentionTcGraph(const AttentionParams& p, cudaStream_t stream) {
  const DType dt = p.q.dtype;
  if (p.seq_capacity <= 0 || p.paged() || (dt != DType::kBF16 && dt != DType::kF16) ||
      p.k.dtype != dt || p.v.dtype != dt || p.out.dtype != dt || p.num_heads <= 0 ||
      p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0 || !AttentionTcEligible(p)) {
    return false;
  }
  return LaunchAny(p, stream, true);
}

}  // namespace sluice::cuda
