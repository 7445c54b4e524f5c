// Decode attention over the paged KV cache (one query per sequence), split along the keys
// (flash-decoding): a block of 4 warps takes one (sequence, KV head, split) and all the
// query heads of that KV head (GQA), its warps striding over the split's keys with an
// online softmax in fp32; a second kernel merges the splits' partial results (running
// maximum, sum and weighted values) into the output. With few sequences the splits keep
// the SMs busy (batch-1 decode); the split count depends only on the batch's sequence and
// head counts, so a recorded decode graph replays the same launches.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

#include "backend/cuda/attention_common.cuh"
#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace sluice::cuda {
namespace {

constexpr int kDecWarps = 4;
constexpr int kMaxGroup = 8;    // query heads per KV head handled in registers
constexpr int kMaxPerLane = 4;  // head_dim <= 128
constexpr int kMinSplitKeys = 32;
constexpr int kMaxSplits = 16;
constexpr int kKeysInFlight = 4;  // keys per warp whose K/V rows are loaded together

template <typename T, int G, int PL>
__global__ void __launch_bounds__(kDecWarps * 32)
    DecodeSplitKernel(const T* __restrict__ q, int64_t ldq, const T* __restrict__ k, int64_t ldk,
                      const T* __restrict__ v, int64_t ldv, const int32_t* __restrict__ cu,
                      KeySource src, int dim, float scale, int window, int splits,
                      float* __restrict__ part) {
  const int kvh = blockIdx.x, seq = blockIdx.y, split = blockIdx.z;
  const int num_kv = gridDim.x;
  PdlTrigger();
  PdlWait();
  const int len = cu[seq + 1] - cu[seq];
  // Partial results: [seq][kv head][split][G] (m, l) then [G][dim] weighted values.
  const int64_t slot = (static_cast<int64_t>(seq) * num_kv + kvh) * splits + split;
  float* out_ml = part + slot * G * (2 + dim);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (len == 0) return;  // a padding sequence of a recorded batch
  const SeqKeys sk = KeysOf(src, cu, seq);
  const int qpos = sk.pre;  // the query's logical position (its own key is the last)
  const int klen = qpos + 1;
  int kbegin = window > 0 ? max(0, qpos - window + 1) : 0;
  const int span = klen - kbegin;
  // Splits of at least kMinSplitKeys keys: short contexts leave the last splits empty.
  const int chunk = max((span + splits - 1) / splits, kMinSplitKeys);
  const int k0 = kbegin + split * chunk, k1 = min(klen, k0 + chunk);
  if (k0 >= k1) {  // empty: the merge skips it
    if (threadIdx.x < G) out_ml[threadIdx.x * 2] = -INFINITY;
    return;
  }

  // This lane's query elements: dims lane + 32 * i.
  float qr[G][PL];
  const int64_t qrow = cu[seq];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int i = 0; i < PL; ++i) {
      const int d = lane + 32 * i;
      qr[g][i] = d < dim
                     ? ToFloat(q[qrow * ldq + static_cast<int64_t>(kvh * G + g) * dim + d]) * scale
                     : 0.f;
    }
  }
  float m[G], l[G], o[G][PL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < PL; ++i) o[g][i] = 0.f;
  }
  // The warp's keys k0 + warp, k0 + warp + kDecWarps, ... in ascending order; the K/V rows
  // of kKeysInFlight of them are loaded before any is used (latency, not bandwidth, bounds
  // one sequence's decode).
  for (int key0 = k0 + warp; key0 < k1; key0 += kDecWarps * kKeysInFlight) {
    float kv[kKeysInFlight][PL], vv[kKeysInFlight][PL];
#pragma unroll
    for (int j = 0; j < kKeysInFlight; ++j) {
      const int key = key0 + j * kDecWarps;
      const bool in = key < k1;
      const int64_t row = in ? sk.Row(key) : 0;
      const T* kr = k + row * ldk + static_cast<int64_t>(kvh) * dim;
      const T* vr = v + row * ldv + static_cast<int64_t>(kvh) * dim;
#pragma unroll
      for (int i = 0; i < PL; ++i) {
        const int d = lane + 32 * i;
        kv[j][i] = in && d < dim ? ToFloat(kr[d]) : 0.f;
        vv[j][i] = in && d < dim ? ToFloat(vr[d]) : 0.f;
      }
    }
#pragma unroll
    for (int j = 0; j < kKeysInFlight; ++j) {
      if (key0 + j * kDecWarps >= k1) break;
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float s = 0.f;
#pragma unroll
        for (int i = 0; i < PL; ++i) s = fmaf(qr[g][i], kv[j][i], s);
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
        const float mn = fmaxf(m[g], s);
        const float corr = __expf(m[g] - mn);  // 0 on the first key (m = -inf)
        const float p = __expf(s - mn);
        l[g] = l[g] * corr + p;
#pragma unroll
        for (int i = 0; i < PL; ++i) o[g][i] = fmaf(p, vv[j][i], o[g][i] * corr);
        m[g] = mn;
      }
    }
  }
  // Merge the warps of the block in shared memory, then write the split's partial.
  __shared__ float sm[kDecWarps][G][2];
  __shared__ float so[kDecWarps][G][32 * PL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) {
      sm[warp][g][0] = m[g];
      sm[warp][g][1] = l[g];
    }
#pragma unroll
    for (int i = 0; i < PL; ++i) so[warp][g][lane + 32 * i] = o[g][i];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * dim; e += blockDim.x) {
    const int g = e / dim, d = e % dim;
    float mx = -INFINITY;
    for (int w = 0; w < kDecWarps; ++w) mx = fmaxf(mx, sm[w][g][0]);
    float ls = 0.f, os = 0.f;
    for (int w = 0; w < kDecWarps; ++w) {
      const float f = sm[w][g][0] == -INFINITY ? 0.f : __expf(sm[w][g][0] - mx);
      ls += sm[w][g][1] * f;
      os += so[w][g][d] * f;
    }
    if (d == 0) {
      out_ml[g * 2] = mx;
      out_ml[g * 2 + 1] = ls;
    }
    out_ml[G * 2 + g * dim + d] = os;
  }
}

template <typename T, int G>
__global__ void DecodeMergeKernel(const float* __restrict__ part, const int32_t* __restrict__ cu,
                                  int dim, int splits, T* __restrict__ out, int64_t ldo) {
  const int kvh = blockIdx.x, seq = blockIdx.y, num_kv = gridDim.x;
  PdlTrigger();
  PdlWait();
  if (cu[seq + 1] == cu[seq]) return;
  const int64_t base = (static_cast<int64_t>(seq) * num_kv + kvh) * splits;
  const int64_t stride = static_cast<int64_t>(G) * (2 + dim);
  // Each split's weight exp(m_s - max m) / sum_s(l_s exp(m_s - max m)), per query head.
  __shared__ float wt[kMaxSplits][G];
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = fmaxf(mx, part[(base + s) * stride + g * 2]);
    float ls = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float ms = part[(base + s) * stride + g * 2];
      const float f = ms == -INFINITY ? 0.f : __expf(ms - mx);
      wt[s][g] = f;
      if (f > 0.f) ls += part[(base + s) * stride + g * 2 + 1] * f;
    }
    const float inv = ls > 0.f ? 1.f / ls : 0.f;
    for (int s = 0; s < splits; ++s) wt[s][g] *= inv;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * dim; e += blockDim.x) {
    const int g = e / dim, d = e % dim;
    float os = 0.f;
    for (int s = 0; s < splits; ++s) {
      const float f = wt[s][g];
      if (f > 0.f) os += part[(base + s) * stride + G * 2 + g * dim + d] * f;
    }
    out[static_cast<int64_t>(cu[seq]) * ldo + static_cast<int64_t>(kvh * G + g) * dim + d] =
        FromFloat<T>(os);
  }
}

// The vectorised kernel for head_dim D in {32, 64, 128}: a key's row is read with 16-byte
// loads by a group of LPK = D / EPL lanes (EPL elements each), so a warp works on KPW =
// 32 / LPK keys at once and each lane keeps U keys' K and V rows in flight; every key group
// keeps its own online-softmax state, merged within the warp by shuffles and across the
// block's warps in shared memory. The block then writes its split's partial; the last block
// of a (sequence, KV head) to finish (a counter in `counters`, reset by that block) merges
// all splits into the output, so no second kernel runs.
struct DecArgs {
  const void* q;
  int64_t ldq;
  const void* k;
  int64_t ldk;
  const void* v;
  int64_t ldv;
  const int32_t* cu;
  KeySource src;
  float scale;
  int window, splits;
  float* part;
  int* counters;  // [seqs * kv heads], zero between launches
  void* out;
  int64_t ldo;
};

template <typename T, int G, int D>
__global__ void __launch_bounds__(kDecWarps * 32) DecodeVecKernel(const DecArgs a) {
  constexpr int EPL = 16 / static_cast<int>(sizeof(T));
  constexpr int LPK = D / EPL, KPW = 32 / LPK;
  constexpr int U = G >= 8 ? 2 : 4;  // keys in flight per lane
  const int kvh = blockIdx.x, seq = blockIdx.y, split = blockIdx.z;
  const int num_kv = gridDim.x, splits = a.splits;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / LPK, sl = lane % LPK;
  PdlTrigger();
  PdlWait();
  const int len = a.cu[seq + 1] - a.cu[seq];
  if (len == 0) return;  // a padding sequence of a recorded batch
  const int64_t slot = (static_cast<int64_t>(seq) * num_kv + kvh) * splits + split;
  float* out_ml = a.part + slot * G * (2 + D);
  const SeqKeys sk = KeysOf(a.src, a.cu, seq);
  const int qpos = sk.pre;
  const int klen = qpos + 1;
  const int kbegin = a.window > 0 ? max(0, qpos - a.window + 1) : 0;
  const int span = klen - kbegin;
  const int chunk = max((span + splits - 1) / splits, kMinSplitKeys);
  const int k0 = kbegin + split * chunk, k1 = min(klen, k0 + chunk);

  float qv[G][EPL];
  const int64_t qrow = a.cu[seq];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const uint4 raw = *reinterpret_cast<const uint4*>(
        static_cast<const T*>(a.q) + qrow * a.ldq + static_cast<int64_t>(kvh * G + g) * D +
        sl * EPL);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int j = 0; j < EPL; ++j) qv[g][j] = ToFloat(e[j]) * a.scale;
  }
  float m[G], l[G], o[G][EPL];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int j = 0; j < EPL; ++j) o[g][j] = 0.f;
  }
  constexpr int kStep = kDecWarps * KPW;  // keys per block step
  // The trip count is the warp's (not the key group's): the shuffles below need all lanes.
  for (int base = k0 + warp * KPW; base < k1; base += kStep * U) {
    const int key0 = base + sub;
    uint4 kr[U], vr[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int key = key0 + u * kStep;
      if (key < k1) {
        const int64_t row = sk.Row(key);
        kr[u] = *reinterpret_cast<const uint4*>(static_cast<const T*>(a.k) + row * a.ldk +
                                                static_cast<int64_t>(kvh) * D + sl * EPL);
        vr[u] = *reinterpret_cast<const uint4*>(static_cast<const T*>(a.v) + row * a.ldv +
                                                static_cast<int64_t>(kvh) * D + sl * EPL);
      } else {
        kr[u] = vr[u] = make_uint4(0, 0, 0, 0);
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const bool in = key0 + u * kStep < k1;
      const T* ke = reinterpret_cast<const T*>(&kr[u]);
      const T* ve = reinterpret_cast<const T*>(&vr[u]);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        float sc = 0.f;
#pragma unroll
        for (int j = 0; j < EPL; ++j) sc = fmaf(qv[g][j], ToFloat(ke[j]), sc);
#pragma unroll
        for (int off = LPK / 2; off > 0; off >>= 1) sc += __shfl_xor_sync(0xffffffffu, sc, off);
        if (in) {
          const float mn = fmaxf(m[g], sc);
          const float corr = __expf(m[g] - mn);  // 0 on the group's first key (m = -inf)
          const float pr = __expf(sc - mn);
          l[g] = l[g] * corr + pr;
#pragma unroll
          for (int j = 0; j < EPL; ++j) o[g][j] = fmaf(pr, ToFloat(ve[j]), o[g][j] * corr);
          m[g] = mn;
        }
      }
    }
  }
  // Merge the warp's key groups (lanes sl, sl + LPK, ...) by shuffles.
#pragma unroll
  for (int off = LPK; off < 32; off <<= 1) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float m2 = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float l2 = __shfl_xor_sync(0xffffffffu, l[g], off);
      const float mx = fmaxf(m[g], m2);
      const float f1 = m[g] == -INFINITY ? 0.f : __expf(m[g] - mx);
      const float f2 = m2 == -INFINITY ? 0.f : __expf(m2 - mx);
      l[g] = l[g] * f1 + l2 * f2;
#pragma unroll
      for (int j = 0; j < EPL; ++j) {
        const float o2 = __shfl_xor_sync(0xffffffffu, o[g][j], off);
        o[g][j] = o[g][j] * f1 + o2 * f2;
      }
      m[g] = mx;
    }
  }
  // Across the block's warps in shared memory, then the split's partial.
  __shared__ float sm[kDecWarps][G][2];
  __shared__ float so[kDecWarps][G][D];
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (sl == 0) {
        sm[warp][g][0] = m[g];
        sm[warp][g][1] = l[g];
      }
#pragma unroll
      for (int j = 0; j < EPL; ++j) so[warp][g][sl * EPL + j] = o[g][j];
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    float mx = -INFINITY;
    for (int w = 0; w < kDecWarps; ++w) mx = fmaxf(mx, sm[w][g][0]);
    float ls = 0.f, os = 0.f;
    for (int w = 0; w < kDecWarps; ++w) {
      const float f = sm[w][g][0] == -INFINITY ? 0.f : __expf(sm[w][g][0] - mx);
      ls += sm[w][g][1] * f;
      os += so[w][g][d] * f;
    }
    if (d == 0) {
      out_ml[g * 2] = mx;
      out_ml[g * 2 + 1] = ls;
    }
    out_ml[G * 2 + g * D + d] = os;
  }
  // The last split block of (seq, kvh) merges every split's partial into the output.
  __threadfence();
  __syncthreads();
  __shared__ bool last;
  if (threadIdx.x == 0) {
    int* c = a.counters + static_cast<int64_t>(seq) * num_kv + kvh;
    last = atomicAdd(c, 1) == splits - 1;
    if (last) *c = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int64_t base = (static_cast<int64_t>(seq) * num_kv + kvh) * splits;
  constexpr int64_t stride = static_cast<int64_t>(G) * (2 + D);
  __shared__ float wt[kMaxSplits][G];
  if (threadIdx.x < G) {
    const int g = threadIdx.x;
    float mx = -INFINITY;
    for (int s2 = 0; s2 < splits; ++s2) mx = fmaxf(mx, __ldcg(&a.part[(base + s2) * stride + g * 2]));
    float ls = 0.f;
    for (int s2 = 0; s2 < splits; ++s2) {
      const float ms = __ldcg(&a.part[(base + s2) * stride + g * 2]);
      const float f = ms == -INFINITY ? 0.f : __expf(ms - mx);
      wt[s2][g] = f;
      if (f > 0.f) ls += __ldcg(&a.part[(base + s2) * stride + g * 2 + 1]) * f;
    }
    const float inv = ls > 0.f ? 1.f / ls : 0.f;
    for (int s2 = 0; s2 < splits; ++s2) wt[s2][g] *= inv;
  }
  __syncthreads();
  T* out = static_cast<T*>(a.out);
  for (int e = threadIdx.x; e < G * D; e += blockDim.x) {
    const int g = e / D, d = e % D;
    float os = 0.f;
    for (int s2 = 0; s2 < splits; ++s2) {
      const float f = wt[s2][g];
      if (f > 0.f) os += __ldcg(&a.part[(base + s2) * stride + G * 2 + g * D + d]) * f;
    }
    out[static_cast<int64_t>(a.cu[seq]) * a.ldo + static_cast<int64_t>(kvh * G + g) * D + d] =
        FromFloat<T>(os);
  }
}

template <typename T, int G>
bool LaunchVec(const AttentionParams& p, int splits, float* part, int* counters,
               cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.num_seqs),
                  static_cast<unsigned>(splits));
  const DecArgs a{p.q.data,     p.q.row_stride(), p.k.data,       p.k.row_stride(),
                  p.v.data,     p.v.row_stride(), p.cu_seqlens,   KeySourceOf(p),
                  p.scale,      p.window,         splits,         part,
                  counters,     p.out.data,       p.out.row_stride()};
  switch (p.head_dim) {
    case 32:
      LaunchPdl("DecodeAttention", DecodeVecKernel<T, G, 32>, grid, dim3(kDecWarps * 32), 0,
                stream, a);
      return true;
    case 64:
      LaunchPdl("DecodeAttention", DecodeVecKernel<T, G, 64>, grid, dim3(kDecWarps * 32), 0,
                stream, a);
      return true;
    case 128:
      LaunchPdl("DecodeAttention", DecodeVecKernel<T, G, 128>, grid, dim3(kDecWarps * 32), 0,
                stream, a);
      return true;
    default:
      return false;
  }
}

template <typename T, int G>
void LaunchDecode(const AttentionParams& p, int splits, float* part, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.num_seqs),
                  static_cast<unsigned>(splits));
  const KeySource src = KeySourceOf(p);
  const T* q = p.q.ptr<T>();
  const T* k = p.k.ptr<T>();
  const T* v = p.v.ptr<T>();
  const int64_t ldq = p.q.row_stride(), ldk = p.k.row_stride(), ldv = p.v.row_stride();
  const int32_t* cu = p.cu_seqlens;
  const int dim = p.head_dim, window = p.window;
  const float scale = p.scale;
  if (p.head_dim <= 64) {
    LaunchPdl("DecodeSplit", DecodeSplitKernel<T, G, 2>, grid, dim3(kDecWarps * 32), 0, stream, q,
              ldq, k, ldk, v, ldv, cu, src, dim, scale, window, splits, part);
  } else {
    LaunchPdl("DecodeSplit", DecodeSplitKernel<T, G, 4>, grid, dim3(kDecWarps * 32), 0, stream, q,
              ldq, k, ldk, v, ldv, cu, src, dim, scale, window, splits, part);
  }
  const float* cpart = part;
  T* out = p.out.ptr<T>();
  const int64_t ldo = p.out.row_stride();
  LaunchPdl("DecodeMerge", DecodeMergeKernel<T, G>,
            dim3(static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.num_seqs)),
            dim3(static_cast<unsigned>(std::min(1024, (G * p.head_dim + 31) / 32 * 32))), 0, stream,
            cpart, cu, dim, splits, out, ldo);
}

template <typename T, int G>
void LaunchAny(const AttentionParams& p, int splits, float* part, int* counters,
               cudaStream_t stream) {
  const bool aligned = p.q.row_stride() % 8 == 0 && p.k.row_stride() % 8 == 0 &&
                       p.v.row_stride() % 8 == 0 &&
                       (reinterpret_cast<uintptr_t>(p.q.data) & 15) == 0 &&
                       (reinterpret_cast<uintptr_t>(p.k.data) & 15) == 0 &&
                       (reinterpret_cast<uintptr_t>(p.v.data) & 15) == 0;
  if (counters != nullptr && aligned && LaunchVec<T, G>(p, splits, part, counters, stream)) return;
  LaunchDecode<T, G>(p, splits, part, stream);
}

template <typename T>
bool LaunchDecodeTyped(const AttentionParams& p, int splits, float* part, int* counters,
                       cudaStream_t stream) {
  switch (p.num_heads / p.num_kv_heads) {
    case 1:
      LaunchAny<T, 1>(p, splits, part, counters, stream);
      return true;
    case 2:
      LaunchAny<T, 2>(p, splits, part, counters, stream);
      return true;
    case 4:
      LaunchAny<T, 4>(p, splits, part, counters, stream);
      return true;
    case 8:
      LaunchAny<T, 8>(p, splits, part, counters, stream);
      return true;
    default:
      return false;
  }
}

}  // namespace

int DecodeAttentionSplits(const AttentionParams& p, int num_sms) {
  const int blocks = p.num_seqs * p.num_kv_heads;
  return std::clamp((2 * num_sms + blocks - 1) / std::max(blocks, 1), 1, kMaxSplits);
}

size_t DecodeAttentionScratch(const AttentionParams& p, int splits) {
  return sizeof(float) * static_cast<size_t>(p.num_seqs) * p.num_heads * splits * (2 + p.head_dim);
}

bool DecodeAttentionEligible(const AttentionParams& p) {
  const int group = p.num_kv_heads > 0 ? p.num_heads / p.num_kv_heads : 0;
  return p.paged() && p.causal && p.key_lens == nullptr && p.max_seqlen <= 1 &&
         p.head_dim <= 32 * kMaxPerLane &&
         (group == 1 || group == 2 || group == 4 || group == kMaxGroup) &&
         p.kv_block_size == kKvBlock;
}

bool DecodeAttention(const AttentionParams& p, int splits, float* scratch, int* counters,
                     cudaStream_t stream) {
  switch (p.q.dtype) {
    case DType::kBF16:
      return LaunchDecodeTyped<__nv_bfloat16>(p, splits, scratch, counters, stream);
    case DType::kF16:
      return LaunchDecodeTyped<__half>(p, splits, scratch, counters, stream);
    case DType::kF32:
      return LaunchDecodeTyped<float>(p, splits, scratch, counters, stream);
    default:
      return false;
  }
}

}  // namespace sluice::cuda
