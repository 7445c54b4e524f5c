// Sampling on the device: one block of 1024 threads per row of logits, the same steps as
// the host sampler (backend/cpu/sampling.h) so that both pick the same tokens up to float
// rounding:
//   raw max and log-sum-exp (the reported logprobs), top raw logprobs (K block argmaxes),
//   adjustments in place (raw values of adjusted tokens saved), then the forced token,
//   greedy argmax, or: y = x / temperature; top_k threshold by a 4-pass radix select of
//   the k-th largest y; e = exp(y - max y); top_p threshold by a binary search over e
//   (the smallest e whose strictly larger tokens hold less than top_p of the mass);
//   min_p; the draw walks the kept e in token-id order.
// The passes over the row (maxima, sums, histograms) are coalesced: thread t takes tokens
// t, t + 1024, ... in order, then a fixed tree over the block; the draw, which walks tokens
// in id order, gives thread t the contiguous chunk [t * C, (t + 1) * C). A row's result
// depends on nothing but the row (batch invariant, deterministic). Only the SampledToken
// rows leave the device.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/sampling_math.h"

namespace sluice::cuda {
namespace {

constexpr int kSampleThreads = 1024;
constexpr int kWarpsPerBlock = kSampleThreads / 32;

struct Shared {
  float red[kWarpsPerBlock];
  int red_i[kWarpsPerBlock];
  unsigned hist[256];
  float chunk[kSampleThreads];
  int top[kMaxLogprobs];
  float bcast;
  int bcast_i;
};

__device__ __forceinline__ float BlockMax(float v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) sh.red[warp] = v;
  __syncthreads();
  float m = sh.red[0];
  for (int w = 1; w < kWarpsPerBlock; ++w) m = fmaxf(m, sh.red[w]);
  return m;
}

// Sum in a fixed order: within warps by the shuffle tree, then warps 0..31 in order.
__device__ __forceinline__ float BlockSumF(float v, Shared& sh) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) sh.red[warp] = v;
  __syncthreads();
  float t = 0.f;
  for (int w = 0; w < kWarpsPerBlock; ++w) t += sh.red[w];
  return t;
}

// The largest value (lowest index among equals) of (v, i) over the block; i = INT_MAX for none.
__device__ __forceinline__ void BlockArgMax(float v, int i, Shared& sh, float* mv, int* mi) {
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (ov > v || (ov == v && oi < i)) {
      v = ov;
      i = oi;
    }
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();
  if (lane == 0) {
    sh.red[warp] = v;
    sh.red_i[warp] = i;
  }
  __syncthreads();
  float bv = sh.red[0];
  int bi = sh.red_i[0];
  for (int w = 1; w < kWarpsPerBlock; ++w) {
    if (sh.red[w] > bv || (sh.red[w] == bv && sh.red_i[w] < bi)) {
      bv = sh.red[w];
      bi = sh.red_i[w];
    }
  }
  *mv = bv;
  *mi = bi;
}

// Order-preserving map of a float to an unsigned key (larger float, larger key).
__device__ __forceinline__ unsigned OrderedKey(float f) {
  const unsigned b = __float_as_uint(f);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float FromOrderedKey(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__global__ void __launch_bounds__(kSampleThreads)
    SampleKernel(float* __restrict__ logits, int64_t ld, int V,
                 const SamplingRow* __restrict__ rows, const SamplingAdjust* __restrict__ adjusts,
                 float* __restrict__ adj_raw, const uint32_t* __restrict__ masks, int mask_words,
                 const int32_t* __restrict__ allowed, float* __restrict__ allowed_vals,
                 SampledToken* __restrict__ out) {
  __shared__ Shared sh;
  const int r = blockIdx.x;
  const SamplingRow row = rows[r];
  float* x = logits + static_cast<int64_t>(r) * ld;
  const int t = threadIdx.x;
  const int C = (V + kSampleThreads - 1) / kSampleThreads;
  const int lo = min(V, t * C), hi = min(V, lo + C);

  // 1. Raw normaliser.
  float m = -INFINITY;
  for (int i = t; i < V; i += kSampleThreads) m = fmaxf(m, x[i]);
  const float m_raw = BlockMax(m, sh);
  float s = 0.f;
  for (int i = t; i < V; i += kSampleThreads) s += __expf(x[i] - m_raw);
  const float lse = m_raw + logf(BlockSumF(s, sh));

  // Top raw logprobs: K block argmaxes, each excluding the tokens already taken.
  const int K = min(row.num_logprobs, min(V, kMaxLogprobs));
  for (int k = 0; k < K; ++k) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = t; i < V; i += kSampleThreads) {
      bool taken = false;
      for (int j = 0; j < k; ++j) taken |= sh.top[j] == i;
      if (!taken && (x[i] > bv || bi == INT_MAX)) {
        bv = x[i];
        bi = i;
      }
    }
    float mv;
    int mi;
    BlockArgMax(bv, bi, sh, &mv, &mi);
    if (t == 0) {
      sh.top[k] = mi;
      out[r].top_ids[k] = mi;
      out[r].top_logprobs[k] = mv - lse;
    }
    __syncthreads();
  }

  // 2. Adjustments (distinct tokens), raw values kept for the chosen token's logprob.
  for (int a = row.adjust_begin + t; a < row.adjust_end; a += kSampleThreads) {
    const SamplingAdjust adj = adjusts[a];
    const float v = x[adj.token];
    adj_raw[a] = v;
    x[adj.token] = (adj.repeat ? RepetitionPenalized(v, row.repetition_penalty) : v) + adj.add;
  }
  __syncthreads();
  // The structured-output mask (a bitmask row uploaded with the rows).
  if (row.mask_row >= 0) {
    const uint32_t* mrow = masks + static_cast<int64_t>(row.mask_row) * mask_words;
    for (int i = t; i < V; i += kSampleThreads) {
      const bool ok = (i >> 5) < mask_words && ((mrow[i >> 5] >> (i & 31)) & 1u);
      if (!ok) x[i] = -INFINITY;
    }
    __syncthreads();
  } else if (row.allowed_begin >= 0) {
    // A sparse allow-list (ids uploaded with the rows): the listed (adjusted) logits saved,
    // every logit -inf, the saved ones back (duplicates write the same value).
    for (int a = row.allowed_begin + t; a < row.allowed_end; a += kSampleThreads) {
      const int id = allowed[a];
      allowed_vals[a] = id >= 0 && id < V ? x[id] : -INFINITY;
    }
    __syncthreads();
    for (int i = t; i < V; i += kSampleThreads) x[i] = -INFINITY;
    __syncthreads();
    for (int a = row.allowed_begin + t; a < row.allowed_end; a += kSampleThreads) {
      const int id = allowed[a];
      if (id >= 0 && id < V) x[id] = allowed_vals[a];
    }
    __syncthreads();
  }

  int token;
  if (row.forced_token >= 0) {
    token = row.forced_token;
  } else if (row.temperature <= 0.f) {
    float bv = -INFINITY;
    int bi = INT_MAX;
    for (int i = t; i < V; i += kSampleThreads) {
      if (x[i] > bv) {
        bv = x[i];
        bi = i;
      }
    }
    float mv;
    BlockArgMax(bv, bi, sh, &mv, &token);
    if (token == INT_MAX) token = 0;  // every logit -inf
  } else {
    const float T = row.temperature;
    // top_k: the k-th largest y by its ordered key, 8 bits per pass from the top.
    float thr = -INFINITY;
    if (row.top_k > 0 && row.top_k < V) {
      unsigned prefix = 0, mask = 0;
      int remaining = row.top_k;
      for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = t; b < 256; b += kSampleThreads) sh.hist[b] = 0;
        __syncthreads();
        for (int i = t; i < V; i += kSampleThreads) {
          const unsigned key = OrderedKey(x[i] / T);
          if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 0xffu], 1u);
        }
        __syncthreads();
        if (t == 0) {
          int digit = 255;
          for (; digit > 0; --digit) {
            if (static_cast<int>(sh.hist[digit]) >= remaining) break;
            remaining -= static_cast<int>(sh.hist[digit]);
          }
          sh.bcast_i = digit;
          sh.hist[0] = static_cast<unsigned>(remaining);  // carried to the next pass
        }
        __syncthreads();
        prefix |= static_cast<unsigned>(sh.bcast_i) << shift;
        mask |= 0xffu << shift;
        remaining = static_cast<int>(sh.hist[0]);
        __syncthreads();
      }
      thr = FromOrderedKey(prefix);
    }
    float my = -INFINITY;
    for (int i = t; i < V; i += kSampleThreads) my = fmaxf(my, x[i] / T);
    const float ymax = BlockMax(my, sh);
    auto e_of = [&](int i) {
      const float y = x[i] / T;
      return (y >= thr && y != -INFINITY) ? __expf(y - ymax) : 0.f;
    };
    float tau = 0.f;
    if (row.top_p < 1.f) {
      float z = 0.f;
      for (int i = t; i < V; i += kSampleThreads) z += e_of(i);
      const float limit = row.top_p * BlockSumF(z, sh);
      // The smallest v in [0, 1] with mass{e > v} < limit, over float bit patterns.
      unsigned a = 0, b = __float_as_uint(1.0f);
      while (a < b) {
        const unsigned mid = a + (b - a) / 2;
        const float v = __uint_as_float(mid);
        float part = 0.f;
        for (int i = t; i < V; i += kSampleThreads) {
          const float e = e_of(i);
          if (e > v) part += e;
        }
        if (BlockSumF(part, sh) < limit) {
          b = mid;
        } else {
          a = mid + 1;
        }
      }
      tau = __uint_as_float(a);
    }
    if (row.min_p > 0.f) tau = fmaxf(tau, row.min_p);
    // Kept mass per chunk, an exclusive scan over the chunks, then the chunk holding the
    // target walks its tokens.
    float part = 0.f;
    int last_kept = -1;
    for (int i = lo; i < hi; ++i) {
      const float e = e_of(i);
      if (e > 0.f && e >= tau) {
        part += e;
        last_kept = i;
      }
    }
    sh.chunk[t] = part;
    float lk;
    int last_any;
    BlockArgMax(static_cast<float>(last_kept), last_kept, sh, &lk, &last_any);
    __syncthreads();
    if (t == 0) {
      float acc = 0.f;
      for (int j = 0; j < kSampleThreads; ++j) {
        const float c = sh.chunk[j];
        sh.chunk[j] = acc;
        acc += c;
      }
      sh.bcast = UniformFloat(row.seed, row.counter) * acc;
      sh.bcast_i = last_any >= 0 ? last_any : 0;  // rounding: the target reached the total
    }
    __syncthreads();
    const float target = sh.bcast;
    const float start = sh.chunk[t];
    const float end = t + 1 < kSampleThreads ? sh.chunk[t + 1] : INFINITY;
    if (start <= target && target < end) {
      float acc = start;
      for (int i = lo; i < hi; ++i) {
        const float e = e_of(i);
        if (!(e > 0.f && e >= tau)) continue;
        acc += e;
        if (acc > target) {
          sh.bcast_i = i;
          break;
        }
      }
    }
    __syncthreads();
    token = sh.bcast_i;
  }

  // The chosen token's raw logit: saved if it was adjusted.
  if (t == 0) sh.bcast = x[token];
  __syncthreads();
  for (int a = row.adjust_begin + t; a < row.adjust_end; a += kSampleThreads) {
    if (adjusts[a].token == token) sh.bcast = adj_raw[a];
  }
  __syncthreads();
  if (t == 0) {
    out[r].token = token;
    out[r].logprob = sh.bcast - lse;
    out[r].num_top = K;
  }
}

__global__ void WriteKvKernel(const uint16_t* __restrict__ k, int64_t ldk,
                              const uint16_t* __restrict__ v, int64_t ldv, uint16_t* kc,
                              int64_t ldkc, uint16_t* vc, int64_t ldvc,
                              const int32_t* __restrict__ slots, int cols) {
  const int64_t row = blockIdx.x;
  const int64_t slot = slots[row];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    kc[slot * ldkc + c] = k[row * ldk + c];
    vc[slot * ldvc + c] = v[row * ldv + c];
  }
}

__global__ void WriteKvKernelF32(const float* __restrict__ k, int64_t ldk,
                                 const float* __restrict__ v, int64_t ldv, float* kc, int64_t ldkc,
                                 float* vc, int64_t ldvc, const int32_t* __restrict__ slots,
                                 int cols) {
  const int64_t row = blockIdx.x;
  const int64_t slot = slots[row];
  for (int c = threadIdx.x; c < cols; c += blockDim.x) {
    kc[slot * ldkc + c] = k[row * ldk + c];
    vc[slot * ldvc + c] = v[row * ldv + c];
  }
}

}  // namespace

void Sample(const SampleParams& p, const SamplingRow* rows, const SamplingAdjust* adjusts,
            float* adj_raw, const uint32_t* masks, const int32_t* allowed, float* allowed_vals,
            SampledToken* out, cudaStream_t stream) {
  if (p.num_rows == 0) return;
  SampleKernel<<<p.num_rows, kSampleThreads, 0, stream>>>(
      p.logits.ptr<float>(), p.logits.row_stride(), static_cast<int>(p.logits.cols), rows, adjusts,
      adj_raw, masks, p.mask_words, allowed, allowed_vals, out);
  CheckLaunch("Sample");
}

void WriteKv(const KvWriteParams& p, cudaStream_t stream) {
  const int64_t n = p.k.rows;
  if (n == 0) return;
  const int cols = static_cast<int>(p.k.cols);
  const int threads = std::min(256, std::max(32, (cols + 31) / 32 * 32));
  if (p.k.dtype == DType::kF32) {
    WriteKvKernelF32<<<static_cast<unsigned>(n), threads, 0, stream>>>(
        p.k.ptr<float>(), p.k.row_stride(), p.v.ptr<float>(), p.v.row_stride(),
        p.k_cache.ptr<float>(), p.k_cache.row_stride(), p.v_cache.ptr<float>(),
        p.v_cache.row_stride(), p.slots, cols);
  } else {
    WriteKvKernel<<<static_cast<unsigned>(n), threads, 0, stream>>>(
        p.k.ptr<uint16_t>(), p.k.row_stride(), p.v.ptr<uint16_t>(), p.v.row_stride(),
        p.k_cache.ptr<uint16_t>(), p.k_cache.row_stride(), p.v_cache.ptr<uint16_t>(),
        p.v_cache.row_stride(), p.slots, cols);
  }
  CheckLaunch("WriteKv");
}

}  // namespace sluice::cuda
