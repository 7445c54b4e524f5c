// Skinny GEMM for decode batches (M <= kGemvMaxRows rows of activations): out[m, n] =
// sum_k W[n, k] x[m, k] (+ bias[n]) (+ residual[m, n]). cuBLASLt's kernels for M = 1..4 read
// the weights at a fraction of the memory bandwidth (the o/down projections, whose N is
// small, worst); here every output row is one or more warps streaming W's row with 16-byte
// loads, double-buffered (2 x kUnroll loads in flight per lane), the activations read
// through L1 or, with the RMSNorm prologue, from shared memory. A row's K range splits over
// `ks` warps when N alone would not fill the GPU; the partial sums meet in shared memory in
// a fixed order, so each output depends only on its own row of x (batch invariant among
// M <= kGemvMaxRows, deterministic).
//
// Fused steps (kernels.h, GemvParams): an RMSNorm prologue (each block normalises the M rows
// of x into shared memory, with RmsNormWarpKernel's arithmetic) and a SiLU-gated epilogue
// (a block computes the same rows of the gate and the up halves and writes SiLU(g) * u).
// Launched with programmatic dependent launch: the first weight loads are issued before
// PdlWait, so they overlap the previous kernel.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace sluice::cuda {
namespace {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kUnroll = 4;
constexpr size_t kMaxNormSmem = 48 * 1024;  // normalised x in shared memory: m * k halves

__device__ __forceinline__ float Dot8(const uint4& w, const uint4& x, __nv_bfloat16) {
  const auto* a = reinterpret_cast<const __nv_bfloat162*>(&w);
  const auto* b = reinterpret_cast<const __nv_bfloat162*>(&x);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __bfloat1622float2(a[i]), fb = __bfloat1622float2(b[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}
__device__ __forceinline__ float Dot8(const uint4& w, const uint4& x, __half) {
  const auto* a = reinterpret_cast<const __half2*>(&w);
  const auto* b = reinterpret_cast<const __half2*>(&x);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 fa = __half22float2(a[i]), fb = __half22float2(b[i]);
    s = fmaf(fa.x, fb.x, s);
    s = fmaf(fa.y, fb.y, s);
  }
  return s;
}

// SiLU(g) * u with the roundings of GatedActivate (kernels.cu): bf16 uses the hardware
// exponential and reciprocal (SiluGatedBf16Kernel), f16 the exact formula (GatedKernel).
__device__ __forceinline__ float GatedSilu(float g, float u, __nv_bfloat16) {
  return g * __frcp_rn(1.f + __expf(-g)) * u;
}
__device__ __forceinline__ float GatedSilu(float g, float u, __half) {
  return g / (1.0f + expf(-g)) * u;
}

struct GemvArgs {
  const void* w;
  int64_t n, k;  // weight rows (both halves with a gate) and columns
  const void* x;
  int64_t ldx;
  const float* norm_weight;
  float eps;
  bool warp_norm;  // RmsNorm's warp-kernel arithmetic (else its row kernel's)
  const float* bias;
  const void* residual;
  int64_t ldr;
  void* out;
  int64_t ldo;
};

// Block: kGemvWarps / KS weight rows, KS warps per row (K split in KS contiguous ranges).
// kGated: the block's rows are pairs (gate row r, up row r + n / 2), adjacent local rows.
// X: x's element type (with kNorm: the residual stream's, f32 or T).
template <typename T, typename O, typename X, int M, int KS, bool kNorm, bool kGated>
__global__ void __launch_bounds__(kGemvThreads) GemvKernel(const GemvArgs a) {
  extern __shared__ uint4 xs[];  // kNorm: [M][k / 8] chunks of the normalised rows
  constexpr int kRows = kGemvWarps / KS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int lr = warp / KS, slice = warp % KS;
  const int64_t half_n = a.n / 2;
  int64_t row;
  bool valid;
  if constexpr (kGated) {
    const int64_t pair = static_cast<int64_t>(blockIdx.x) * (kRows / 2) + lr / 2;
    valid = pair < half_n;
    row = pair + (lr % 2) * half_n;
  } else {
    row = static_cast<int64_t>(blockIdx.x) * kRows + lr;
    valid = row < a.n;
  }
  const int64_t chunks = a.k / 8;  // 16-byte chunks of a row
  const int64_t per = (chunks + KS - 1) / KS;
  const int64_t c0 = slice * per, c1 = valid ? min(chunks, c0 + per) : c0;
  const uint4* wr = reinterpret_cast<const uint4*>(static_cast<const T*>(a.w) + row * a.k);

  // The weights never change: the first loads go out before the dependency wait.
  uint4 wv[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = c0 + lane + 32 * u;
    wv[u] = i < c1 ? __ldcs(wr + i) : make_uint4(0, 0, 0, 0);
  }
  PdlTrigger();
  PdlWait();

  if constexpr (kNorm) {
    // Warp m < M: row m's inverse RMS, summed as RmsNormWarpKernel does (lane l holds the
    // 4-element groups (i * 32 + l) * 4, squares accumulated in order, then a butterfly).
    __shared__ float rsq[M];
    const X* x = static_cast<const X*>(a.x);
    if (a.warp_norm) {
      if (warp < M) {
        const int nv = static_cast<int>(a.k / 128);
        float s = 0.f;
        for (int i = 0; i < nv; ++i) {
          float v[4];
          Load<X, 4>(x + warp * a.ldx + (i * 32 + lane) * 4, v);
#pragma unroll
          for (int j = 0; j < 4; ++j) s += v[j] * v[j];
        }
        const float r = rsqrtf(WarpSum(s) / static_cast<float>(a.k) + a.eps);
        if (lane == 0) rsq[warp] = r;
      }
    } else {
      // RmsNormRowKernel's order: thread t sums columns t, t + 256, ..., then BlockSum.
      __shared__ float sh[32];
#pragma unroll
      for (int m = 0; m < M; ++m) {
        float s = 0.f;
        for (int64_t c = threadIdx.x; c < a.k; c += kGemvThreads) {
          const float v = ToFloat(x[m * a.ldx + c]);
          s += v * v;
        }
        const float r = rsqrtf(BlockSum(s, sh) / static_cast<float>(a.k) + a.eps);
        if (threadIdx.x == 0) rsq[m] = r;
      }
    }
    __syncthreads();
    T* xh = reinterpret_cast<T*>(xs);
    for (int64_t e = threadIdx.x * 4; e < M * a.k; e += kGemvThreads * 4) {
      const int m = static_cast<int>(e / a.k);
      const int64_t c = e - m * a.k;
      float v[4], o[4];
      Load<X, 4>(x + m * a.ldx + c, v);
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = v[j] * rsq[m] * a.norm_weight[c + j];
      Store<T, 4>(xh + e, o);
    }
    __syncthreads();
  }

  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.f;
  for (int64_t c = c0 + lane; c < c1; c += 32 * kUnroll) {
    uint4 nx[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = c + 32 * (kUnroll + u);
      nx[u] = i < c1 ? __ldcs(wr + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = c + 32 * u;
      if (i >= c1) break;
#pragma unroll
      for (int m = 0; m < M; ++m) {
        uint4 xv;
        if constexpr (kNorm) {
          xv = xs[m * chunks + i];
        } else {
          xv = __ldg(reinterpret_cast<const uint4*>(static_cast<const T*>(a.x) + m * a.ldx) + i);
        }
        acc[m] += Dot8(wv[u], xv, T{});
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) wv[u] = nx[u];
  }
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = WarpSum(acc[m]);
  if constexpr (KS > 1) {
    __shared__ float part[kGemvWarps][M];
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) part[warp][m] = acc[m];
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < KS; ++j) s += part[lr * KS + j][m];
      acc[m] = s;
    }
  }
  const float b = valid && a.bias ? a.bias[row] : 0.f;
  if constexpr (kGated) {
    // Each row's value rounded as the GEMM output it replaces, then the gated activation.
    __shared__ float gu[kRows][M];
    if (slice == 0 && lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) gu[lr][m] = ToFloat(FromFloat<T>(acc[m] + b));
    }
    __syncthreads();
    const int t = threadIdx.x;
    if (t < (kRows / 2) * M) {
      const int p = t / M, m = t % M;
      const int64_t col = static_cast<int64_t>(blockIdx.x) * (kRows / 2) + p;
      if (col < half_n) {
        static_cast<O*>(a.out)[m * a.ldo + col] =
            FromFloat<O>(GatedSilu(gu[2 * p][m], gu[2 * p + 1][m], T{}));
      }
    }
    return;
  }
  if (slice != 0 || lane != 0 || !valid) return;
  const O* residual = static_cast<const O*>(a.residual);
  O* out = static_cast<O*>(a.out);
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = acc[m] + b;
    if (residual) v += ToFloat(residual[m * a.ldr + row]);
    out[m * a.ldo + row] = FromFloat<O>(v);
  }
}

template <typename T, typename O, typename X, int M, bool kNorm, bool kGated>
void LaunchKs(const GemvParams& p, const GemvArgs& a, int ks, cudaStream_t stream) {
  const int rows = kGemvWarps / ks;
  const int64_t units = kGated ? p.n / 2 : p.n;
  const int per_block = kGated ? rows / 2 : rows;
  const auto blocks = static_cast<unsigned>((units + per_block - 1) / per_block);
  const size_t smem = kNorm ? static_cast<size_t>(M) * p.k * sizeof(T) : 0;
#define SLUICE_GEMV(KS)                                                                          \
  LaunchPdl("Gemv", GemvKernel<T, O, X, M, KS, kNorm, kGated>, dim3(blocks), dim3(kGemvThreads), \
            smem, stream, a)
  switch (ks) {
    case 1:
      SLUICE_GEMV(1);
      break;
    case 2:
      SLUICE_GEMV(2);
      break;
    case 4:
      SLUICE_GEMV(4);
      break;
    default:
      if constexpr (!kGated) SLUICE_GEMV(8);
      break;
  }
#undef SLUICE_GEMV
}

template <typename T, typename O, typename X, int M>
void LaunchModes(const GemvParams& p, const GemvArgs& a, cudaStream_t stream) {
  const bool norm = p.norm_weight != nullptr, gated = p.gate != Activation::kNone;
  int ks = GemvSplits(p.n, p.k);
  if (gated) ks = std::min(ks, 4);  // a block holds >= one (gate, up) pair
  // The norm prologue runs once per block: one weight row per warp keeps the grid to the
  // fewest blocks (one wave for the 0.6B shapes, where a second wave cost a prologue more).
  if (norm) ks = 1;
  if (norm && gated) {
    LaunchKs<T, O, X, M, true, true>(p, a, ks, stream);
  } else if (norm) {
    LaunchKs<T, O, X, M, true, false>(p, a, ks, stream);
  } else if (gated) {
    LaunchKs<T, O, X, M, false, true>(p, a, ks, stream);
  } else {
    LaunchKs<T, O, X, M, false, false>(p, a, ks, stream);
  }
}

template <typename T, typename O, typename X>
void LaunchTyped(const GemvParams& p, const GemvArgs& a, cudaStream_t stream) {
  switch (p.m) {
    case 1:
      LaunchModes<T, O, X, 1>(p, a, stream);
      break;
    case 2:
      LaunchModes<T, O, X, 2>(p, a, stream);
      break;
    case 3:
      LaunchModes<T, O, X, 3>(p, a, stream);
      break;
    default:
      LaunchModes<T, O, X, 4>(p, a, stream);
      break;
  }
}

template <typename T>
void LaunchOut(const GemvParams& p, const GemvArgs& a, cudaStream_t stream) {
  // x is in T except for a normalised f32 residual stream.
  if (p.x_dtype == DType::kF32) {
    if (p.out_dtype == DType::kF32) {
      LaunchTyped<T, float, float>(p, a, stream);
    } else {
      LaunchTyped<T, T, float>(p, a, stream);
    }
  } else if (p.out_dtype == DType::kF32) {
    LaunchTyped<T, float, T>(p, a, stream);
  } else {
    LaunchTyped<T, T, T>(p, a, stream);
  }
}

}  // namespace

int GemvSplits(int64_t n, int64_t k) {
  // Enough warps to keep every SM's loads in flight (~8k), each warp >= 64 chunks of K.
  int ks = 1;
  while (ks < 8 && n * ks < 8192 && k / (8 * 2 * ks) >= 64) ks *= 2;
  return ks;
}

bool GemvEligible(const GemvParams& p) {
  const bool half = p.w_dtype == DType::kBF16 || p.w_dtype == DType::kF16;
  const auto aligned = [](const void* ptr) { return (reinterpret_cast<uintptr_t>(ptr) & 15) == 0; };
  if (!half || p.m < 1 || p.m > kGemvMaxRows || p.k % 8 != 0 || !aligned(p.w) || !aligned(p.x)) {
    return false;
  }
  if (p.out_dtype != DType::kF32 && p.out_dtype != p.w_dtype) return false;
  if (p.norm_weight != nullptr) {
    // The residual stream: f32 or the weight dtype, rows of 4-element aligned groups.
    if (p.x_dtype != DType::kF32 && p.x_dtype != p.w_dtype) return false;
    if (p.ldx % 4 != 0) return false;
    if (static_cast<size_t>(p.m * p.k) * DTypeSize(p.w_dtype) > kMaxNormSmem) return false;
  } else if (p.x_dtype != p.w_dtype || p.ldx % 8 != 0) {
    return false;
  }
  if (p.gate != Activation::kNone) {
    if (p.gate != Activation::kSilu || p.n % 2 != 0 || p.residual != nullptr ||
        p.out_dtype != p.w_dtype) {
      return false;
    }
  }
  return true;
}

void Gemv(const GemvParams& p, cudaStream_t stream) {
  const GemvArgs a{
      p.w,    p.n,        p.k,   p.x,   p.ldx, p.norm_weight, p.eps, RmsNormWarpColumns(p.k),
      p.bias, p.residual, p.ldr, p.out, p.ldo};
  if (p.w_dtype == DType::kBF16) {
    LaunchOut<__nv_bfloat16>(p, a, stream);
  } else {
    LaunchOut<__half>(p, a, stream);
  }
}

}  // namespace sluice::cuda
