// Variable-length attention over packed sequences (cu_seqlens), FlashAttention-2 style:
// K/V tiles staged in shared memory, online softmax in fp32, output normalised once.
//
// Grid: (sequence, query block of kWarps rows, head). Each warp owns one query row; the
// lanes of a warp score one key each per tile of 32 keys and then accumulate P·V with
// ceil(head_dim / 32) output columns per lane. Tiles start at the sequence's first token
// and every reduction has a fixed order, so a sequence's result is bit-identical whatever
// else is in the batch (batch invariance) and duplicates are bit-identical.
//
// AttentionKernelRows (head_dim % 4 == 0) blocks kRows query rows per warp; AttentionKernel
// (one row per warp) serves any other head_dim. Both run on CUDA cores in fp32 for f32,
// bf16 and f16 tensors (values converted to fp32 on load). bf16/f16 with head_dim 32, 64
// or 128 goes to the tensor-core kernel (attention_tc.cu).
//
// Shared-prefix reuse (AttentionParams::prefix_of): a sequence with a prefix sees the keys
// of its prefix sequence before its own, in logical order, so key tiles still start at
// logical position 0 and the per-row arithmetic is the same as for the full sequence. A
// paged KV cache (generation) is read the same way: queries at logical positions
// kv_start + i, keys 0 .. kv_start + len - 1 gathered from cache rows through the block
// table (attention_common.cuh, SeqKeys).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernels.h"

namespace sluice::cuda {
namespace {

// Stages the K/V tile of logical keys [t0, t0 + nk) as fp32 in shared memory (K rows `kst`
// apart, V rows `dim` apart), zero-filling up to kKeys rows.
constexpr int kKeys = 32;  // keys per tile of the CUDA-core kernels (one per lane)
template <typename T>
__device__ __forceinline__ void StageKv(const T* __restrict__ k, int64_t ldk,
                                        const T* __restrict__ v, int64_t ldv, int kvh, int dim,
                                        int t0, int nk, const SeqKeys& keys, float* ks, int kst,
                                        float* vs) {
  for (int e = threadIdx.x; e < kKeys * dim; e += blockDim.x) {
    const int j = e / dim, c = e % dim;
    float kv = 0.f, vv = 0.f;
    if (j < nk) {
      const int64_t row = keys.Row(t0 + j);
      kv = ToFloat(k[row * ldk + static_cast<int64_t>(kvh) * dim + c]);
      vv = ToFloat(v[row * ldv + static_cast<int64_t>(kvh) * dim + c]);
    }
    ks[j * kst + c] = kv;
    vs[j * dim + c] = vv;
  }
}

constexpr int kWarps = 8;  // query rows per block

template <typename T, int NC>  // output columns per lane: head_dim <= 32 * NC
__global__ void __launch_bounds__(kWarps * 32)
    AttentionKernel(const T* __restrict__ q, int64_t ldq, const T* __restrict__ k, int64_t ldk,
                    const T* __restrict__ v, int64_t ldv, T* __restrict__ out, int64_t ldo,
                    const int32_t* __restrict__ cu, int group, int dim, float scale, bool causal,
                    int window, KeySource src) {
  extern __shared__ float smem[];
  float* ks = smem;                    // [kKeys][dim + 1]
  float* vs = ks + kKeys * (dim + 1);  // [kKeys][dim]
  float* qs = vs + kKeys * dim;        // [kWarps][dim]
  const int seq = blockIdx.x, h = blockIdx.z, kvh = h / group;
  const int base = cu[seq], len = cu[seq + 1] - base;
  // Keys in logical order: the prefix sequence's rows (or cached keys), then its own.
  const SeqKeys sk = KeysOf(src, cu, seq);
  const int pre = sk.pre, klen = KeyLimit(src, seq, pre + len);
  const int q0 = blockIdx.y * kWarps;
  if (q0 >= len) return;  // whole block past this sequence's end
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int qi = q0 + warp;  // query row within the sequence
  const int qL = pre + qi;   // its logical position
  const bool active = qi < len;

  if (active) {
    const T* qr = q + static_cast<int64_t>(base + qi) * ldq + static_cast<int64_t>(h) * dim;
    for (int c = lane; c < dim; c += 32) qs[warp * dim + c] = ToFloat(qr[c]);
  }
  KeyRange keys = VisibleKeys(pre, len, q0, kWarps, causal, window, kKeys);
  keys.end = min(keys.end, klen);  // a key limit (rows left with no key: zeros)

  float m = -INFINITY, l = 0.f;
  float acc[NC];
#pragma unroll
  for (int i = 0; i < NC; ++i) acc[i] = 0.f;

  for (int t0 = keys.begin; t0 < keys.end; t0 += kKeys) {
    __syncthreads();  // previous tile fully consumed (and qs written, on the first pass)
    const int nk = min(kKeys, klen - t0);
    StageKv(k, ldk, v, ldv, kvh, dim, t0, nk, sk, ks, dim + 1, vs);
    __syncthreads();
    if (!active) continue;
    // Score of key t0 + lane.
    const int kj = t0 + lane;
    bool ok = lane < nk;
    if (causal) ok = ok && kj <= qL;
    if (window > 0) ok = ok && abs(qL - kj) < window;
    float s = -INFINITY;
    if (ok) {
      const float* kr = ks + lane * (dim + 1);
      const float* qr = qs + warp * dim;
      float dot = 0.f;
      for (int c = 0; c < dim; ++c) dot = fmaf(qr[c], kr[c], dot);
      s = dot * scale;
    }
    float tmax = s;
    for (int o = 16; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
    if (tmax == -INFINITY) continue;  // nothing visible in this tile for this row
    const float m_new = fmaxf(m, tmax);
    const float corr = expf(m - m_new);  // 0 on the first visible tile (m = -inf)
    const float p = ok ? expf(s - m_new) : 0.f;
    float psum = p;
    for (int o = 16; o > 0; o >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, o);
    l = l * corr + psum;
    m = m_new;
#pragma unroll
    for (int i = 0; i < NC; ++i) acc[i] *= corr;
    for (int j = 0; j < nk; ++j) {
      const float pj = __shfl_sync(0xffffffffu, p, j);
      const float* vr = vs + j * dim;
#pragma unroll
      for (int i = 0; i < NC; ++i) {
        const int c = lane + 32 * i;
        if (c < dim) acc[i] = fmaf(pj, vr[c], acc[i]);
      }
    }
  }
  if (!active) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  T* o = out + static_cast<int64_t>(base + qi) * ldo + static_cast<int64_t>(h) * dim;
#pragma unroll
  for (int i = 0; i < NC; ++i) {
    const int c = lane + 32 * i;
    if (c < dim) o[c] = FromFloat<T>(acc[i] * inv);
  }
}

// Register-blocked variant for head_dim % 4 == 0 (all real models): each warp owns kRows
// query rows, so every K/V value read from shared memory feeds kRows FMAs, and Q·K reads
// 16 bytes at a time. Same tiling rules as above (tiles start at the sequence's first
// token, fixed reduction orders), so it is batch invariant too.
constexpr int kRows = 4;                 // query rows per warp
constexpr int kBlockQ = kRows * kWarps;  // query rows per block

template <typename T, int NC>
__global__ void __launch_bounds__(kWarps * 32)
    AttentionKernelRows(const T* __restrict__ q, int64_t ldq, const T* __restrict__ k, int64_t ldk,
                        const T* __restrict__ v, int64_t ldv, T* __restrict__ out, int64_t ldo,
                        const int32_t* __restrict__ cu, int group, int dim, float scale,
                        bool causal, int window, KeySource src) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int kst = dim + 4;       // padded K row: 16-byte aligned, conflict-free
  float* ks = smem;              // [kKeys][dim + 4]
  float* vs = ks + kKeys * kst;  // [kKeys][dim]
  float* qs = vs + kKeys * dim;  // [kBlockQ][dim]
  const int seq = blockIdx.x, h = blockIdx.z, kvh = h / group;
  const int base = cu[seq], len = cu[seq + 1] - base;
  const SeqKeys sk = KeysOf(src, cu, seq);
  // Logical keys: prefix (or cached), own, cut at the key limit.
  const int pre = sk.pre, klen = KeyLimit(src, seq, pre + len);
  const int q0 = blockIdx.y * kBlockQ;
  if (q0 >= len) return;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = q0 + warp * kRows;  // this warp's first query row (in-sequence)
  for (int e = threadIdx.x; e < kBlockQ * dim; e += blockDim.x) {
    const int r = e / dim, c = e % dim;
    qs[e] =
        q0 + r < len
            ? ToFloat(
                  q[static_cast<int64_t>(base + q0 + r) * ldq + static_cast<int64_t>(h) * dim + c])
            : 0.f;
  }
  KeyRange keys = VisibleKeys(pre, len, q0, kBlockQ, causal, window, kKeys);
  keys.end = min(keys.end, klen);
  float m[kRows], l[kRows], acc[kRows][NC];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
#pragma unroll
    for (int i = 0; i < NC; ++i) acc[r][i] = 0.f;
  }
  const int d4 = dim / 4;
  for (int t0 = keys.begin; t0 < keys.end; t0 += kKeys) {
    __syncthreads();
    const int nk = min(kKeys, klen - t0);
    StageKv(k, ldk, v, ldv, kvh, dim, t0, nk, sk, ks, kst, vs);
    __syncthreads();
    if (r0 >= len) continue;  // warp-uniform: this warp has no rows
    float dot[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) dot[r] = 0.f;
    const float4* kr = reinterpret_cast<const float4*>(ks + lane * kst);
    const float4* qr = reinterpret_cast<const float4*>(qs + warp * kRows * dim);
    for (int c = 0; c < d4; ++c) {
      const float4 kk = kr[c];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 qq = qr[r * d4 + c];
        dot[r] = fmaf(qq.x, kk.x, dot[r]);
        dot[r] = fmaf(qq.y, kk.y, dot[r]);
        dot[r] = fmaf(qq.z, kk.z, dot[r]);
        dot[r] = fmaf(qq.w, kk.w, dot[r]);
      }
    }
    const int kj = t0 + lane;
    float p[kRows], corr[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int qi = r0 + r, qL = pre + qi;
      bool ok = lane < nk && qi < len;
      if (causal) ok = ok && kj <= qL;
      if (window > 0) ok = ok && abs(qL - kj) < window;
      const float s = ok ? dot[r] * scale : -INFINITY;
      float tmax = s;
      for (int o = 16; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, o));
      if (tmax == -INFINITY) {  // nothing visible for this row in this tile: no-op
        corr[r] = 1.f;
        p[r] = 0.f;
        continue;
      }
      const float m_new = fmaxf(m[r], tmax);
      corr[r] = expf(m[r] - m_new);
      p[r] = ok ? expf(s - m_new) : 0.f;
      float ps = p[r];
      for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
      l[r] = l[r] * corr[r] + ps;
      m[r] = m_new;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int i = 0; i < NC; ++i) acc[r][i] *= corr[r];
    }
    for (int j = 0; j < nk; ++j) {
      float pj[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) pj[r] = __shfl_sync(0xffffffffu, p[r], j);
      const float* vr = vs + j * dim;
#pragma unroll
      for (int i = 0; i < NC; ++i) {
        const int c = lane + 32 * i;
        if (c < dim) {
          const float vv = vr[c];
#pragma unroll
          for (int r = 0; r < kRows; ++r) acc[r][i] = fmaf(pj[r], vv, acc[r][i]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int qi = r0 + r;
    if (qi >= len) continue;
    const float inv = l[r] > 0.f ? 1.f / l[r] : 0.f;
    T* o = out + static_cast<int64_t>(base + qi) * ldo + static_cast<int64_t>(h) * dim;
#pragma unroll
    for (int i = 0; i < NC; ++i) {
      const int c = lane + 32 * i;
      if (c < dim) o[c] = FromFloat<T>(acc[r][i] * inv);
    }
  }
}

size_t SmemBytesRows(int dim) {
  return sizeof(float) * (static_cast<size_t>(kKeys) * (dim + 4) +
                          static_cast<size_t>(kKeys) * dim + static_cast<size_t>(kBlockQ) * dim);
}

size_t SmemBytes(int dim) {
  return sizeof(float) * (static_cast<size_t>(kKeys) * (dim + 1) +
                          static_cast<size_t>(kKeys) * dim + static_cast<size_t>(kWarps) * dim);
}

template <typename T, int NC>
bool Launch(const AttentionParams& p, cudaStream_t stream) {
  // Above 48 KiB a kernel needs an explicit opt-in; raise it once per instantiation to what
  // its largest head_dim (32 * NC) needs.
  static const bool raised =
      (SmemBytes(32 * NC) <= 48 * 1024 ||
       cudaFuncSetAttribute(AttentionKernel<T, NC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(SmemBytes(32 * NC))) == cudaSuccess) &&
      (SmemBytesRows(32 * NC) <= 48 * 1024 ||
       cudaFuncSetAttribute(AttentionKernelRows<T, NC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(SmemBytesRows(32 * NC))) == cudaSuccess);
  if (!raised) return false;
  const int group = p.num_heads / p.num_kv_heads;
  if (p.head_dim % 4 == 0) {
    const dim3 grid(static_cast<unsigned>(p.num_seqs),
                    static_cast<unsigned>((p.max_seqlen + kBlockQ - 1) / kBlockQ),
                    static_cast<unsigned>(p.num_heads));
    AttentionKernelRows<T, NC><<<grid, kWarps * 32, SmemBytesRows(p.head_dim), stream>>>(
        p.q.ptr<T>(), p.q.row_stride(), p.k.ptr<T>(), p.k.row_stride(), p.v.ptr<T>(),
        p.v.row_stride(), p.out.ptr<T>(), p.out.row_stride(), p.cu_seqlens, group, p.head_dim,
        p.scale, p.causal, p.window, KeySourceOf(p));
  } else {
    const dim3 grid(static_cast<unsigned>(p.num_seqs),
                    static_cast<unsigned>((p.max_seqlen + kWarps - 1) / kWarps),
                    static_cast<unsigned>(p.num_heads));
    AttentionKernel<T, NC><<<grid, kWarps * 32, SmemBytes(p.head_dim), stream>>>(
        p.q.ptr<T>(), p.q.row_stride(), p.k.ptr<T>(), p.k.row_stride(), p.v.ptr<T>(),
        p.v.row_stride(), p.out.ptr<T>(), p.out.row_stride(), p.cu_seqlens, group, p.head_dim,
        p.scale, p.causal, p.window, KeySourceOf(p));
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "sluice cuda: attention launch failed: %s\n", cudaGetErrorString(e));
    std::abort();
  }
  return true;
}

template <typename T>
bool LaunchGeneric(const AttentionParams& p, cudaStream_t stream) {
  if (p.head_dim <= 32) return Launch<T, 1>(p, stream);
  if (p.head_dim <= 64) return Launch<T, 2>(p, stream);
  if (p.head_dim <= 128) return Launch<T, 4>(p, stream);
  return Launch<T, 8>(p, stream);
}

template <typename T>
bool LaunchHalf(const AttentionParams& p, cudaStream_t stream) {
  if (AttentionTcEligible(p)) return AttentionTc(p, stream);  // attention_tc.cu
  return LaunchGeneric<T>(p, stream);
}

}  // namespace

bool Attention(const AttentionParams& p, cudaStream_t stream) {
  const DType dt = p.q.dtype;
  if (p.k.dtype != dt || p.v.dtype != dt || p.out.dtype != dt || p.head_dim <= 0 ||
      p.head_dim > kMaxHeadDim || p.num_kv_heads <= 0 || p.num_heads % p.num_kv_heads != 0) {
    return false;
  }
  if (p.paged() && (p.kv_block_size != kKvBlock || p.prefix_of != nullptr || !p.causal ||
                    p.key_lens != nullptr)) {
    return false;
  }
  if (p.num_seqs == 0 || p.max_seqlen == 0 || p.num_heads == 0) return true;
  switch (dt) {
    case DType::kF32:
      return LaunchGeneric<float>(p, stream);
    case DType::kBF16:
      return LaunchHalf<__nv_bfloat16>(p, stream);
    case DType::kF16:
      return LaunchHalf<__half>(p, stream);
    default:
      return false;
  }
}

}  // namespace sluice::cuda
