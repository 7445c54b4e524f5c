// Skinny GEMM for decode batches (M <= kGemvMaxRows rows of activations): out[m, n] =
// sum_k W[n, k] x[m, k] (+ bias[n]) (+ residual[m, n]). cuBLASLt's kernels for M = 1..4 read
// the weights at a fraction of the memory bandwidth (the o/down projections, whose N is
// small, worst); here every output row is one or more warps streaming W's row with 16-byte
// loads, four in flight per lane, the activations read through L1. A row's K range splits
// over `ks` warps when N alone would not fill the GPU; the partial sums meet in shared
// memory in a fixed order, so each output depends only on its own row of x (batch
// invariant among M <= kGemvMaxRows, deterministic).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kGemvThreads = 256;
constexpr int kGemvWarps = kGemvThreads / 32;
constexpr int kUnroll = 4;

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

// Block: kGemvWarps / KS output rows, KS warps per row (K split in KS contiguous ranges).
template <typename T, typename O, int M, int KS>
__global__ void __launch_bounds__(kGemvThreads)
    GemvKernel(const T* __restrict__ w, int64_t n, int64_t k, const T* __restrict__ x, int64_t ldx,
               const float* __restrict__ bias, const O* residual, int64_t ldr, O* out,
               int64_t ldo) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kGemvWarps / KS) + warp / KS;
  const int slice = warp % KS;
  const int64_t chunks = k / 8;  // 16-byte chunks of a row
  const int64_t per = (chunks + KS - 1) / KS;
  const int64_t c0 = slice * per, c1 = min(chunks, c0 + per);
  float acc[M];
#pragma unroll
  for (int m = 0; m < M; ++m) acc[m] = 0.f;
  if (row < n) {
    const uint4* wr = reinterpret_cast<const uint4*>(w + row * k);
    for (int64_t c = c0 + lane; c < c1; c += 32 * kUnroll) {
      uint4 wv[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = c + 32 * u;
        wv[u] = i < c1 ? __ldcs(wr + i) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t i = c + 32 * u;
        if (i >= c1) break;
#pragma unroll
        for (int m = 0; m < M; ++m) {
          const uint4 xv = __ldg(reinterpret_cast<const uint4*>(x + m * ldx) + i);
          acc[m] += Dot8(wv[u], xv, T{});
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc[m] += __shfl_xor_sync(0xffffffffu, acc[m], o);
  }
  if constexpr (KS > 1) {
    __shared__ float part[kGemvWarps][M];
    if (lane == 0) {
#pragma unroll
      for (int m = 0; m < M; ++m) part[warp][m] = acc[m];
    }
    __syncthreads();
    if (slice != 0) return;
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float s = 0.f;
#pragma unroll
      for (int j = 0; j < KS; ++j) s += part[warp + j][m];
      acc[m] = s;
    }
  }
  if (lane != 0 || row >= n) return;
  const float b = bias ? bias[row] : 0.f;
#pragma unroll
  for (int m = 0; m < M; ++m) {
    float v = acc[m] + b;
    if (residual) v += ToFloat(residual[m * ldr + row]);
    out[m * ldo + row] = FromFloat<O>(v);
  }
}

template <typename T, typename O, int M>
void LaunchM(const GemvParams& p, cudaStream_t stream) {
  const auto* w = static_cast<const T*>(p.w);
  const auto* x = static_cast<const T*>(p.x);
  const auto* r = static_cast<const O*>(p.residual);
  auto* o = static_cast<O*>(p.out);
  const int ks = GemvSplits(p.n, p.k);
  const auto blocks = static_cast<unsigned>((p.n + kGemvWarps / ks - 1) / (kGemvWarps / ks));
#define SLUICE_GEMV(KS)   \
  GemvKernel<T, O, M, KS> \
      <<<blocks, kGemvThreads, 0, stream>>>(w, p.n, p.k, x, p.ldx, p.bias, r, p.ldr, o, p.ldo)
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
      SLUICE_GEMV(8);
      break;
  }
#undef SLUICE_GEMV
  CheckLaunch("Gemv");
}

template <typename T, typename O>
void LaunchTyped(const GemvParams& p, cudaStream_t stream) {
  switch (p.m) {
    case 1:
      LaunchM<T, O, 1>(p, stream);
      break;
    case 2:
      LaunchM<T, O, 2>(p, stream);
      break;
    case 3:
      LaunchM<T, O, 3>(p, stream);
      break;
    default:
      LaunchM<T, O, 4>(p, stream);
      break;
  }
}

template <typename T>
void LaunchOut(const GemvParams& p, cudaStream_t stream) {
  if (p.out_dtype == DType::kF32) {
    LaunchTyped<T, float>(p, stream);
  } else {
    LaunchTyped<T, T>(p, stream);
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
  return half && p.m >= 1 && p.m <= kGemvMaxRows && p.k % 8 == 0 && p.ldx % 8 == 0 &&
         aligned(p.w) && aligned(p.x) && (p.out_dtype == DType::kF32 || p.out_dtype == p.w_dtype);
}

void Gemv(const GemvParams& p, cudaStream_t stream) {
  if (p.w_dtype == DType::kBF16) {
    LaunchOut<__nv_bfloat16>(p, stream);
  } else {
    LaunchOut<__half>(p, stream);
  }
}

}  // namespace sluice::cuda
