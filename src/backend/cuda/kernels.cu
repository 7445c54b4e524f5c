// Element-wise, normalisation, RoPE, gather and pooling kernels of the CUDA backend.
// Correctness first: simple, coalesced, deterministic (fixed reduction orders, no atomics),
// so a row's result never depends on the other rows of the batch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>

#include "backend/cuda/convert.cuh"
#include "backend/cuda/kernels.h"

namespace sluice::cuda {
namespace {

constexpr int kThreads = 256;

void CheckLaunch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "sluice cuda: launching %s failed: %s\n", what, cudaGetErrorString(e));
    std::abort();
  }
}

// Element-wise kernels over [rows, cols] run on a 2-D grid: x covers the columns, y strides
// over the rows (no 64-bit division per element).
dim3 Grid2D(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, (cols + kThreads - 1) / kThreads)),
              static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535)));
}
#define SLUICE_FOR_EACH_ELEMENT(rows, cols)                                      \
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
  if (c >= (cols)) return;                                                       \
  for (int64_t r = blockIdx.y; r < (rows); r += gridDim.y)

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads));
}

__device__ __forceinline__ float ApplyAct(float x, Activation act) {
  switch (act) {
    case Activation::kGeluErf:
      return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
    case Activation::kGeluTanh:
      return 0.5f * x * (1.0f + tanhf(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    case Activation::kSilu:
      return x / (1.0f + expf(-x));
    case Activation::kRelu:
      return x > 0.f ? x : 0.f;
    case Activation::kNone:
      break;
  }
  return x;
}

__device__ __forceinline__ float LoadAny(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::kBF16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case DType::kF16:
      return __half2float(static_cast<const __half*>(p)[i]);
    default:
      return static_cast<const float*>(p)[i];
  }
}

// Deterministic sum over the block (blockDim.x a multiple of 32, <= 1024).
__device__ float BlockSum(float v, float* shared32) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // shared32 may still be read by a previous call
  if (lane == 0) shared32[warp] = v;
  __syncthreads();
  const int nw = blockDim.x / 32;
  float t = 0.f;
  for (int w = 0; w < nw; ++w) t += shared32[w];
  return t;
}

__device__ __forceinline__ void StoreAny(void* p, DType t, int64_t i, float v) {
  switch (t) {
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
      break;
    case DType::kF16:
      static_cast<__half*>(p)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<float*>(p)[i] = v;
  }
}

// N consecutive elements in one access (N * sizeof(T) is 4, 8 or 16 bytes and the pointer
// is aligned to it).
template <int Bytes>
struct Chunk;
template <>
struct Chunk<4> {
  using type = uint32_t;
};
template <>
struct Chunk<8> {
  using type = uint2;
};
template <>
struct Chunk<16> {
  using type = uint4;
};
template <typename T, int N>
__device__ __forceinline__ void Load(const T* p, float (&v)[N]) {
  using C = typename Chunk<N * sizeof(T)>::type;
  const C c = *reinterpret_cast<const C*>(p);
  const T* e = reinterpret_cast<const T*>(&c);
#pragma unroll
  for (int j = 0; j < N; ++j) v[j] = ToFloat(e[j]);
}
template <typename T, int N>
__device__ __forceinline__ void Store(T* p, const float (&v)[N]) {
  using C = typename Chunk<N * sizeof(T)>::type;
  C c;
  T* e = reinterpret_cast<T*>(&c);
#pragma unroll
  for (int j = 0; j < N; ++j) e[j] = FromFloat<T>(v[j]);
  *reinterpret_cast<C*>(p) = c;
}

__global__ void ConvertKernel(const void* src, DType st, int64_t lds, int64_t rows, int64_t cols,
                              void* dst, DType dt) {
  SLUICE_FOR_EACH_ELEMENT(rows, cols) {
    StoreAny(dst, dt, r * cols + c, LoadAny(src, st, r * lds + c));
  }
}

__global__ void BiasActResidualKernel(const void* in, DType it, int64_t ldi, const float* bias,
                                      Activation act, const void* res, DType rt, int64_t ldr,
                                      void* out, DType ot, int64_t ldo, int64_t rows,
                                      int64_t cols) {
  SLUICE_FOR_EACH_ELEMENT(rows, cols) {
    float v = LoadAny(in, it, r * ldi + c);
    if (bias) v += bias[c];
    v = ApplyAct(v, act);
    if (res) v += LoadAny(res, rt, r * ldr + c);
    StoreAny(out, ot, r * ldo + c, v);
  }
}

__global__ void EmbeddingKernel(const void* table, DType tt, int64_t ldt, const int32_t* ids,
                                int64_t n, void* out, DType ot, int64_t ldo, int64_t cols,
                                bool acc) {
  SLUICE_FOR_EACH_ELEMENT(n, cols) {
    float v = LoadAny(table, tt, static_cast<int64_t>(ids[r]) * ldt + c);
    if (acc) v += LoadAny(out, ot, r * ldo + c);
    StoreAny(out, ot, r * ldo + c, v);
  }
}

// One block per row; three passes over global memory (sum, squared deviations, write) so
// any width works and out may alias x or residual (each element is read and written by
// the same thread).
__global__ void LayerNormKernel(const void* x, DType xt, int64_t ldx, const void* res, DType rt,
                                int64_t ldr, const float* gamma, const float* beta, float eps,
                                void* out, DType ot, int64_t ldo, int64_t n) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  auto val = [&](int64_t c) {
    return LoadAny(x, xt, r * ldx + c) + (res ? LoadAny(res, rt, r * ldr + c) : 0.f);
  };
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += val(c);
  const float mean = BlockSum(s, sh) / static_cast<float>(n);
  float q = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float d = val(c) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(BlockSum(q, sh) / static_cast<float>(n) + eps);
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    StoreAny(out, ot, r * ldo + c, (val(c) - mean) * rstd * gamma[c] + (beta ? beta[c] : 0.f));
  }
}

// Whole-row RMSNorm: one block per row. The row is kept in registers between the passes
// (up to kRowRegs values per thread), so out may alias residual.
constexpr int kRowRegs = 16;
__global__ void RmsNormRowKernel(void* res, DType rt, int64_t ldr, const void* delta, DType dt,
                                 int64_t ldd, const float* w, float eps, void* out, DType ot,
                                 int64_t ldo, int64_t n) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  float vals[kRowRegs];
  float s = 0.f;
  int i = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x, ++i) {
    float v = LoadAny(res, rt, r * ldr + c);
    if (delta) {
      v += LoadAny(delta, dt, r * ldd + c);
      StoreAny(res, rt, r * ldr + c, v);
      v = LoadAny(res, rt, r * ldr + c);  // the stored (rounded) value is what is normalised
    }
    if (i < kRowRegs) vals[i] = v;
    s += v * v;
  }
  const float rs = rsqrtf(BlockSum(s, sh) / static_cast<float>(n) + eps);
  i = 0;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x, ++i) {
    const float v = i < kRowRegs ? vals[i] : LoadAny(res, rt, r * ldr + c);
    StoreAny(out, ot, r * ldo + c, v * rs * w[c]);
  }
}

// Fast whole-row RMSNorm without delta: R residual (f32, or the activation dtype) -> T, one
// warp per row, cols = 128 * NV (NV groups of 4 elements per lane kept in registers),
// 4-element loads and stores.
template <typename R, typename T, int NV>
__global__ void __launch_bounds__(256)
    RmsNormWarpKernel(const R* res, int64_t ldr, const float* w, float eps, T* out, int64_t ldo,
                      int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  constexpr int n = 128 * NV;
  float v[NV][4];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    Load<R, 4>(res + r * ldr + (i * 32 + lane) * 4, v[i]);
#pragma unroll
    for (int j = 0; j < 4; ++j) s += v[i][j] * v[i][j];
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float rs = rsqrtf(s / static_cast<float>(n) + eps);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int c = (i * 32 + lane) * 4;
    float o4[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) o4[j] = v[i][j] * rs * w[c + j];
    Store<T, 4>(out + r * ldo + c, o4);
  }
}

// Fast whole-row LayerNorm without residual (BERT-family post-norm: the residual rides on
// the preceding GEMM): X -> T, one warp per row, cols = 128 * NV, the row in registers
// (4-element loads), two passes over registers (mean, then the squared deviations) with
// warp reductions, instead of a block per row with two block reductions and three reads.
template <typename X, typename T, int NV>
__global__ void __launch_bounds__(256)
    LayerNormWarpKernel(const X* x, int64_t ldx, const float* __restrict__ gamma,
                        const float* __restrict__ beta, float eps, T* out, int64_t ldo,
                        int64_t rows) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows) return;
  constexpr int n = 128 * NV;
  float v[NV][4];
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    Load<X, 4>(x + r * ldx + (i * 32 + lane) * 4, v[i]);
#pragma unroll
    for (int j = 0; j < 4; ++j) s += v[i][j];
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float mean = s / static_cast<float>(n);
  float q = 0.f;
#pragma unroll
  for (int i = 0; i < NV; ++i) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float d = v[i][j] - mean;
      q += d * d;
    }
  }
  for (int o = 16; o > 0; o >>= 1) q += __shfl_xor_sync(0xffffffffu, q, o);
  const float rstd = rsqrtf(q / static_cast<float>(n) + eps);
#pragma unroll
  for (int i = 0; i < NV; ++i) {
    const int c = (i * 32 + lane) * 4;
    float o4[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      o4[j] = (v[i][j] - mean) * rstd * gamma[c + j] + (beta != nullptr ? beta[c + j] : 0.f);
    }
    Store<T, 4>(out + r * ldo + c, o4);
  }
}

// Grouped RMSNorm (per-head QK-norm): one warp per (row, group).
__global__ void RmsNormGroupKernel(void* res, DType rt, int64_t ldr, const void* delta, DType dt,
                                   int64_t ldd, const float* w, float eps, void* out, DType ot,
                                   int64_t ldo, int64_t rows, int64_t groups, int g) {
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (wid >= rows * groups) return;
  const int64_t r = wid / groups, g0 = (wid % groups) * g;
  const int64_t xo = r * ldr + g0;
  float s = 0.f;
  for (int c = lane; c < g; c += 32) {
    float v = LoadAny(res, rt, xo + c);
    if (delta) {
      v += LoadAny(delta, dt, r * ldd + g0 + c);
      StoreAny(res, rt, xo + c, v);
      v = LoadAny(res, rt, xo + c);
    }
    s += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float rs = rsqrtf(s / static_cast<float>(g) + eps);
  for (int c = lane; c < g; c += 32) {
    StoreAny(out, ot, r * ldo + g0 + c, LoadAny(res, rt, xo + c) * rs * w[c]);
  }
}

// cos/sin of pos * inv_freq[k]: from the table (rows = positions, half entries each) when
// given, else computed (float32 angle as Hugging Face computes it, cos/sin in double for an
// exact rounding; the table holds the same values).
__device__ __forceinline__ float2 CosSin(const float2* table, const float* inv_freq, int pos, int k,
                                         int half) {
  if (table) return table[static_cast<int64_t>(pos) * half + k];
  const double ang = static_cast<double>(static_cast<float>(pos) * inv_freq[k]);
  return make_float2(static_cast<float>(cos(ang)), static_cast<float>(sin(ang)));
}

__global__ void RopeKernel(void* x, DType xt, int64_t ldx, const int32_t* pos,
                           const float* inv_freq, const float2* table, int64_t rows, int heads,
                           int head_dim, int half, bool neox) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * heads * half) return;
  const int k = static_cast<int>(i % half);
  const int h = static_cast<int>((i / half) % heads);
  const int64_t t = i / (static_cast<int64_t>(half) * heads);
  const float2 cs = CosSin(table, inv_freq, pos[t], k, half);
  const int64_t xh = t * ldx + static_cast<int64_t>(h) * head_dim;
  const int a = neox ? k : 2 * k, b = neox ? k + half : 2 * k + 1;
  const float xa = LoadAny(x, xt, xh + a), xb = LoadAny(x, xt, xh + b);
  StoreAny(x, xt, xh + a, xa * cs.x - xb * cs.y);
  StoreAny(x, xt, xh + b, xb * cs.x + xa * cs.y);
}

// Fused per-head RMSNorm + RoPE, in place: one warp per (token, head); the normalised head
// is staged in shared memory (fp32) so the rotation pairs any two elements; one rounding
// to the tensor's dtype at the end.
constexpr int kQkWarps = 8;
__global__ void __launch_bounds__(kQkWarps * 32)
    QkNormRopeKernel(void* x, DType xt, int64_t ldx, const int32_t* pos, const float* w, float eps,
                     const float* inv_freq, const float2* table, int64_t rows, int heads,
                     int head_dim, int half, bool neox) {
  __shared__ float buf[kQkWarps][kMaxHeadDim];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t wid = static_cast<int64_t>(blockIdx.x) * kQkWarps + warp;
  if (wid >= rows * heads) return;
  const int64_t t = wid / heads;
  const int h = static_cast<int>(wid % heads);
  const int64_t xo = t * ldx + static_cast<int64_t>(h) * head_dim;
  float* b = buf[warp];
  float s = 0.f;
  for (int c = lane; c < head_dim; c += 32) {
    const float v = LoadAny(x, xt, xo + c);
    b[c] = v;
    s += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float rs = rsqrtf(s / static_cast<float>(head_dim) + eps);
  __syncwarp();
  for (int c = lane; c < head_dim; c += 32) b[c] = b[c] * rs * w[c];
  __syncwarp();
  const int p = pos[t];
  for (int c = lane; c < head_dim; c += 32) {
    float v = b[c];
    if (c < 2 * half) {
      int k, partner;
      bool first;
      if (neox) {
        first = c < half;
        k = first ? c : c - half;
        partner = first ? c + half : c - half;
      } else {
        first = (c & 1) == 0;
        k = c / 2;
        partner = first ? c + 1 : c - 1;
      }
      const float2 cs = CosSin(table, inv_freq, p, k, half);
      const float o = b[partner];
      v = first ? v * cs.x - o * cs.y : v * cs.x + o * cs.y;
    }
    StoreAny(x, xt, xo + c, v);
  }
}

// Fast path of QkNormRope for neox RoPE over the whole head (Qwen3, Llama...), head_dim =
// 32 * EPL: one warp per token, lane l holds elements [EPL * l, EPL * (l + 1)) of every
// head; the rotation partner of element c (c +- head_dim / 2) sits in lane l ^ 16. The
// token's cos/sin values are loaded once and reused for all of its heads.
template <typename T, int EPL>
__global__ void __launch_bounds__(kQkWarps * 32)
    QkNormRopeNeoxKernel(T* x, int64_t ldx, const int32_t* pos, const float* w, float eps,
                         const float* inv_freq, const float2* table, int64_t rows, int heads) {
  constexpr int D = 32 * EPL, kHalf = D / 2;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * kQkWarps + warp;
  if (t >= rows) return;
  const int c0 = lane * EPL;
  const bool first = lane < 16;
  float wl[EPL], cs[EPL], sn[EPL];
  const int p = pos[t];
#pragma unroll
  for (int j = 0; j < EPL; ++j) {
    wl[j] = w[c0 + j];
    const float2 v = CosSin(table, inv_freq, p, (c0 + j) % kHalf, kHalf);
    cs[j] = v.x;
    sn[j] = first ? -v.y : v.y;  // first half: x*cos - partner*sin
  }
  for (int h = 0; h < heads; ++h) {
    T* xh = x + t * ldx + static_cast<int64_t>(h) * D + c0;
    float v[EPL];
    Load<T, EPL>(xh, v);
    float ss = 0.f;
#pragma unroll
    for (int j = 0; j < EPL; ++j) ss += v[j] * v[j];
    for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);
    const float rs = rsqrtf(ss / static_cast<float>(D) + eps);
#pragma unroll
    for (int j = 0; j < EPL; ++j) v[j] = v[j] * rs * wl[j];
    float out[EPL];
#pragma unroll
    for (int j = 0; j < EPL; ++j) {
      const float partner = __shfl_xor_sync(0xffffffffu, v[j], 16);
      out[j] = v[j] * cs[j] + partner * sn[j];
    }
    Store<T, EPL>(xh, out);
  }
}

__global__ void ActivateKernel(void* x, DType xt, int64_t ldx, int64_t rows, int64_t cols,
                               Activation act) {
  SLUICE_FOR_EACH_ELEMENT(rows, cols) {
    const int64_t o = r * ldx + c;
    StoreAny(x, xt, o, ApplyAct(LoadAny(x, xt, o), act));
  }
}

__global__ void GatedKernel(const void* gu, DType gt, int64_t ldg, Activation act, void* out,
                            DType ot, int64_t ldo, int64_t rows, int64_t cols) {
  SLUICE_FOR_EACH_ELEMENT(rows, cols) {
    const float g = LoadAny(gu, gt, r * ldg + c), u = LoadAny(gu, gt, r * ldg + cols + c);
    StoreAny(out, ot, r * ldo + c, ApplyAct(g, act) * u);
  }
}

// bf16 -> bf16 gated activation, 8 columns per thread with 16-byte accesses (cols, strides
// multiples of 8, 16-byte aligned pointers). Same arithmetic as GatedKernel.
__global__ void GatedKernelBf16x8(const uint4* gu, int64_t ldg8, Activation act, uint4* out,
                                  int64_t ldo8, int64_t rows, int64_t cols8) {
  SLUICE_FOR_EACH_ELEMENT(rows, cols8) {
    const uint4 g4 = gu[r * ldg8 + c], u4 = gu[r * ldg8 + cols8 + c];
    const auto* g = reinterpret_cast<const __nv_bfloat16*>(&g4);
    const auto* u = reinterpret_cast<const __nv_bfloat16*>(&u4);
    uint4 o4;
    auto* o = reinterpret_cast<__nv_bfloat16*>(&o4);
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      o[j] = __float2bfloat16_rn(ApplyAct(__bfloat162float(g[j]), act) * __bfloat162float(u[j]));
    }
    out[r * ldo8 + c] = o4;
  }
}

// SiLU-gated bf16 -> bf16 over rows * cols8 16-byte chunks numbered flat (n < 2^31), two
// chunks per thread (blockDim apart) loaded before either is computed; SiLU with the
// hardware exponential and reciprocal (within a few fp32 ulps of x / (1 + expf(-x)), far
// below the bf16 rounding of the output).
__device__ __forceinline__ float SiluFast(float x) { return x * __frcp_rn(1.f + __expf(-x)); }
constexpr int kGatedPerThread = 2;
__global__ void __launch_bounds__(kThreads)
    SiluGatedBf16Kernel(const uint4* __restrict__ gu, int64_t ldg8, uint4* __restrict__ out,
                        int64_t ldo8, uint32_t n, uint32_t cols8) {
  const uint32_t i0 = blockIdx.x * (kThreads * kGatedPerThread) + threadIdx.x;
  uint4 g4[kGatedPerThread] = {}, u4[kGatedPerThread] = {};
  uint32_t r[kGatedPerThread], c[kGatedPerThread];
#pragma unroll
  for (int k = 0; k < kGatedPerThread; ++k) {
    const uint32_t i = i0 + k * kThreads;
    r[k] = i / cols8;
    c[k] = i - r[k] * cols8;
    if (i < n) {
      g4[k] = gu[r[k] * ldg8 + c[k]];
      u4[k] = gu[r[k] * ldg8 + cols8 + c[k]];
    }
  }
#pragma unroll
  for (int k = 0; k < kGatedPerThread; ++k) {
    if (i0 + k * kThreads >= n) break;
    const auto* g = reinterpret_cast<const __nv_bfloat162*>(&g4[k]);
    const auto* u = reinterpret_cast<const __nv_bfloat162*>(&u4[k]);
    uint4 o4;
    auto* o = reinterpret_cast<__nv_bfloat162*>(&o4);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float2 gf = __bfloat1622float2(g[j]), uf = __bfloat1622float2(u[j]);
      o[j] = __floats2bfloat162_rn(SiluFast(gf.x) * uf.x, SiluFast(gf.y) * uf.y);
    }
    out[r[k] * ldo8 + c[k]] = o4;
  }
}

__global__ void AddKernel(const void* a, DType at, int64_t lda, const void* b, DType bt,
                          int64_t ldb, void* out, DType ot, int64_t ldo, int64_t rows,
                          int64_t cols) {
  SLUICE_FOR_EACH_ELEMENT(rows, cols) {
    StoreAny(out, ot, r * ldo + c, LoadAny(a, at, r * lda + c) + LoadAny(b, bt, r * ldb + c));
  }
}

template <typename T>
__global__ void GatherRowsKernel(const T* x, int64_t ldx, const int32_t* rows, int64_t n, T* out,
                                 int64_t ldo, int64_t cols) {
  SLUICE_FOR_EACH_ELEMENT(n, cols) {
    out[r * ldo + c] = x[static_cast<int64_t>(rows[r]) * ldx + c];
  }
}

__global__ void PoolKernel(const void* h, DType ht, int64_t ldh, const int32_t* cu, int num_seqs,
                           float* out, int64_t ldo, int64_t cols, PoolMode mode) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_seqs * cols) return;
  const int64_t s = i / cols, c = i % cols;
  const int b = cu[s], len = cu[s + 1] - b;
  double v = 0;
  if (len > 0) {
    switch (mode) {
      case PoolMode::kCls:
        v = LoadAny(h, ht, b * ldh + c);
        break;
      case PoolMode::kLast:
        v = LoadAny(h, ht, static_cast<int64_t>(b + len - 1) * ldh + c);
        break;
      case PoolMode::kMean:
        for (int r = 0; r < len; ++r) v += LoadAny(h, ht, static_cast<int64_t>(b + r) * ldh + c);
        v /= len;
        break;
      case PoolMode::kMax:
        v = LoadAny(h, ht, b * ldh + c);
        for (int r = 1; r < len; ++r) {
          v = fmax(v, static_cast<double>(LoadAny(h, ht, static_cast<int64_t>(b + r) * ldh + c)));
        }
        break;
    }
  }
  out[s * ldo + c] = static_cast<float>(v);
}

}  // namespace

void Convert(const Tensor& src, void* dst, DType dst_dtype, cudaStream_t stream) {
  const int64_t n = src.numel();
  if (n == 0) return;
  ConvertKernel<<<Grid2D(src.rows, src.cols), kThreads, 0, stream>>>(
      src.data, src.dtype, src.row_stride(), src.rows, src.cols, dst, dst_dtype);
  CheckLaunch("Convert");
}

void ToF32(const Tensor& src, float* dst, cudaStream_t stream) {
  Convert(src, dst, DType::kF32, stream);
}

void BiasActResidual(const Tensor& in, const float* bias, Activation act, const Tensor* residual,
                     const Tensor& out, cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  BiasActResidualKernel<<<Grid2D(out.rows, out.cols), kThreads, 0, stream>>>(
      in.data, in.dtype, in.row_stride(), bias, act, residual ? residual->data : nullptr,
      residual ? residual->dtype : DType::kF32, residual ? residual->row_stride() : 0, out.data,
      out.dtype, out.row_stride(), out.rows, out.cols);
  CheckLaunch("BiasActResidual");
}

void EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n, const Tensor& out,
                     bool accumulate, cudaStream_t stream) {
  if (n * out.cols == 0) return;
  EmbeddingKernel<<<Grid2D(n, out.cols), kThreads, 0, stream>>>(
      table.data, table.dtype, table.row_stride(), ids, n, out.data, out.dtype, out.row_stride(),
      out.cols, accumulate);
  CheckLaunch("EmbeddingGather");
}

namespace {
bool LayerNormWarpPath(const Tensor& x, const Tensor& gamma, const Tensor* beta, float eps,
                       const Tensor& out, cudaStream_t stream);  // below, with WithType
}  // namespace

void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor* beta,
               float eps, const Tensor& out, cudaStream_t stream) {
  if (x.rows == 0) return;
  if (residual == nullptr && LayerNormWarpPath(x, gamma, beta, eps, out, stream)) {
    CheckLaunch("LayerNorm");
    return;
  }
  LayerNormKernel<<<static_cast<unsigned>(x.rows), kThreads, 0, stream>>>(
      x.data, x.dtype, x.row_stride(), residual ? residual->data : nullptr,
      residual ? residual->dtype : DType::kF32, residual ? residual->row_stride() : 0,
      gamma.ptr<float>(), beta ? beta->ptr<float>() : nullptr, eps, out.data, out.dtype,
      out.row_stride(), x.cols);
  CheckLaunch("LayerNorm");
}

namespace {

bool Aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// Calls f(T{}) with T the C++ type of a float dtype.
template <typename F>
void WithType(DType dt, F&& f) {
  switch (dt) {
    case DType::kBF16:
      f(__nv_bfloat16{});
      break;
    case DType::kF16:
      f(__half{});
      break;
    default:
      f(float{});
  }
}

template <typename R, typename T>
bool RmsNormWarp(const Tensor& res, const Tensor& w, float eps, const Tensor& out,
                 cudaStream_t stream) {
  const unsigned blocks = static_cast<unsigned>((res.rows + 7) / 8);
  const R* r = res.ptr<R>();
  T* o = out.ptr<T>();
  const int64_t ldr = res.row_stride(), ldo = out.row_stride();
  switch (res.cols / 128) {
#define SLUICE_RMS_CASE(NV)                                                          \
  case NV:                                                                           \
    RmsNormWarpKernel<R, T, NV>                                                      \
        <<<blocks, 256, 0, stream>>>(r, ldr, w.ptr<float>(), eps, o, ldo, res.rows); \
    return true;
    SLUICE_RMS_CASE(1)
    SLUICE_RMS_CASE(2)
    SLUICE_RMS_CASE(4)
    SLUICE_RMS_CASE(6)
    SLUICE_RMS_CASE(8)
    SLUICE_RMS_CASE(12)
    SLUICE_RMS_CASE(16)
    SLUICE_RMS_CASE(20)
    SLUICE_RMS_CASE(32)
#undef SLUICE_RMS_CASE
    default:
      return false;
  }
}

}  // namespace

namespace {

// Dispatches LayerNormWarpKernel: rows of 128 * NV columns (NV in the list below), 4-element
// aligned; false (nothing launched) otherwise.
bool LayerNormWarpPath(const Tensor& x, const Tensor& gamma, const Tensor* beta, float eps,
                       const Tensor& out, cudaStream_t stream) {
  if (x.cols % 128 != 0 || !Aligned(x.data, 4 * DTypeSize(x.dtype)) || x.row_stride() % 4 != 0 ||
      !Aligned(out.data, 4 * DTypeSize(out.dtype)) || out.row_stride() % 4 != 0) {
    return false;
  }
  bool done = false;
  const unsigned blocks = static_cast<unsigned>((x.rows + 7) / 8);
  const float* b = beta != nullptr ? beta->ptr<float>() : nullptr;
  WithType(x.dtype, [&](auto xtag) {
    WithType(out.dtype, [&](auto otag) {
      using X = decltype(xtag);
      using T = decltype(otag);
      switch (x.cols / 128) {
#define SLUICE_LN_CASE(NV)                                                                   \
  case NV:                                                                                   \
    LayerNormWarpKernel<X, T, NV>                                                            \
        <<<blocks, 256, 0, stream>>>(x.ptr<X>(), x.row_stride(), gamma.ptr<float>(), b, eps, \
                                     out.ptr<T>(), out.row_stride(), x.rows);                \
    done = true;                                                                             \
    break;
        SLUICE_LN_CASE(1)
        SLUICE_LN_CASE(2)
        SLUICE_LN_CASE(3)
        SLUICE_LN_CASE(4)
        SLUICE_LN_CASE(6)
        SLUICE_LN_CASE(8)
#undef SLUICE_LN_CASE
        default:
          break;
      }
    });
  });
  return done;
}

}  // namespace

void RmsNorm(const Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
             const Tensor& out, int group, cudaStream_t stream) {
  if (residual.rows == 0) return;
  if (delta == nullptr && group <= 0 && residual.cols % 128 == 0 &&
      Aligned(residual.data, 4 * DTypeSize(residual.dtype)) && residual.row_stride() % 4 == 0 &&
      Aligned(out.data, 4 * DTypeSize(out.dtype)) && out.row_stride() % 4 == 0) {
    bool done = false;
    WithType(residual.dtype, [&](auto rtag) {
      WithType(out.dtype, [&](auto tag) {
        done = RmsNormWarp<decltype(rtag), decltype(tag)>(residual, weight, eps, out, stream);
      });
    });
    if (done) {
      CheckLaunch("RmsNorm");
      return;
    }
  }
  const void* d = delta ? delta->data : nullptr;
  const DType dt = delta ? delta->dtype : DType::kF32;
  const int64_t ldd = delta ? delta->row_stride() : 0;
  if (group <= 0 || group >= residual.cols) {
    RmsNormRowKernel<<<static_cast<unsigned>(residual.rows), kThreads, 0, stream>>>(
        residual.data, residual.dtype, residual.row_stride(), d, dt, ldd, weight.ptr<float>(), eps,
        out.data, out.dtype, out.row_stride(), residual.cols);
  } else {
    const int64_t groups = residual.cols / group;
    RmsNormGroupKernel<<<Blocks(residual.rows * groups * 32), kThreads, 0, stream>>>(
        residual.data, residual.dtype, residual.row_stride(), d, dt, ldd, weight.ptr<float>(), eps,
        out.data, out.dtype, out.row_stride(), residual.rows, groups, group);
  }
  CheckLaunch("RmsNorm");
}

void Rope(const RopeParams& p, const float* inv_freq, const float2* table, cudaStream_t stream) {
  const int rot = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
  const int half = rot / 2;
  const int64_t n = p.x.rows * p.num_heads * half;
  if (n == 0) return;
  RopeKernel<<<Blocks(n), kThreads, 0, stream>>>(p.x.data, p.x.dtype, p.x.row_stride(), p.positions,
                                                 inv_freq, table, p.x.rows, p.num_heads, p.head_dim,
                                                 half, p.style == RopeStyle::kNeox);
  CheckLaunch("Rope");
}

bool QkNormRope(const RopeParams& p, const Tensor& norm_weight, float eps, const float* inv_freq,
                const float2* table, cudaStream_t stream) {
  if (p.head_dim > kMaxHeadDim) return false;
  const int rot = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
  const int64_t n = p.x.rows * p.num_heads;
  if (n == 0) return true;
  const int epl = p.head_dim / 32;
  if (p.style == RopeStyle::kNeox && rot == p.head_dim && (p.head_dim == 64 || p.head_dim == 128) &&
      Aligned(p.x.data, epl * DTypeSize(p.x.dtype)) && p.x.row_stride() % epl == 0) {
    const unsigned blocks = static_cast<unsigned>((p.x.rows + kQkWarps - 1) / kQkWarps);
    WithType(p.x.dtype, [&](auto tag) {
      using T = decltype(tag);
      if (epl == 2) {
        QkNormRopeNeoxKernel<T, 2><<<blocks, kQkWarps * 32, 0, stream>>>(
            p.x.ptr<T>(), p.x.row_stride(), p.positions, norm_weight.ptr<float>(), eps, inv_freq,
            table, p.x.rows, p.num_heads);
      } else {
        QkNormRopeNeoxKernel<T, 4><<<blocks, kQkWarps * 32, 0, stream>>>(
            p.x.ptr<T>(), p.x.row_stride(), p.positions, norm_weight.ptr<float>(), eps, inv_freq,
            table, p.x.rows, p.num_heads);
      }
    });
    CheckLaunch("QkNormRope");
    return true;
  }
  QkNormRopeKernel<<<static_cast<unsigned>((n + kQkWarps - 1) / kQkWarps), kQkWarps * 32, 0,
                     stream>>>(p.x.data, p.x.dtype, p.x.row_stride(), p.positions,
                               norm_weight.ptr<float>(), eps, inv_freq, table, p.x.rows,
                               p.num_heads, p.head_dim, rot / 2, p.style == RopeStyle::kNeox);
  CheckLaunch("QkNormRope");
  return true;
}

void Activate(const Tensor& x, Activation act, cudaStream_t stream) {
  if (x.numel() == 0 || act == Activation::kNone) return;
  ActivateKernel<<<Grid2D(x.rows, x.cols), kThreads, 0, stream>>>(x.data, x.dtype, x.row_stride(),
                                                                  x.rows, x.cols, act);
  CheckLaunch("Activate");
}

void GatedActivate(const Tensor& gate_up, Activation act, const Tensor& out, cudaStream_t stream) {
  if (out.numel() == 0) return;
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  if (gate_up.dtype == DType::kBF16 && out.dtype == DType::kBF16 && out.cols % 8 == 0 &&
      gate_up.row_stride() % 8 == 0 && out.row_stride() % 8 == 0 && aligned(gate_up.data) &&
      aligned(out.data)) {
    const int64_t n = out.rows * (out.cols / 8);
    if (act == Activation::kSilu && n < (int64_t{1} << 31) - 2 * kThreads * kGatedPerThread) {
      const auto blocks = static_cast<unsigned>((n + kThreads * kGatedPerThread - 1) /
                                                (kThreads * kGatedPerThread));
      SiluGatedBf16Kernel<<<blocks, kThreads, 0, stream>>>(
          static_cast<const uint4*>(gate_up.data), gate_up.row_stride() / 8,
          static_cast<uint4*>(out.data), out.row_stride() / 8, static_cast<uint32_t>(n),
          static_cast<uint32_t>(out.cols / 8));
      CheckLaunch("GatedActivate");
      return;
    }
    GatedKernelBf16x8<<<Grid2D(out.rows, out.cols / 8), kThreads, 0, stream>>>(
        static_cast<const uint4*>(gate_up.data), gate_up.row_stride() / 8, act,
        static_cast<uint4*>(out.data), out.row_stride() / 8, out.rows, out.cols / 8);
  } else {
    GatedKernel<<<Grid2D(out.rows, out.cols), kThreads, 0, stream>>>(
        gate_up.data, gate_up.dtype, gate_up.row_stride(), act, out.data, out.dtype,
        out.row_stride(), out.rows, out.cols);
  }
  CheckLaunch("GatedActivate");
}

void Add(const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream) {
  if (out.numel() == 0) return;
  AddKernel<<<Grid2D(out.rows, out.cols), kThreads, 0, stream>>>(
      a.data, a.dtype, a.row_stride(), b.data, b.dtype, b.row_stride(), out.data, out.dtype,
      out.row_stride(), out.rows, out.cols);
  CheckLaunch("Add");
}

void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, const Tensor& out,
                cudaStream_t stream) {
  if (n * out.cols == 0) return;
  const dim3 blocks = Grid2D(n, out.cols);
  switch (DTypeSize(x.dtype)) {
    case 2:
      GatherRowsKernel<<<blocks, kThreads, 0, stream>>>(x.ptr<uint16_t>(), x.row_stride(), rows, n,
                                                        out.ptr<uint16_t>(), out.row_stride(),
                                                        out.cols);
      break;
    case 8:
      GatherRowsKernel<<<blocks, kThreads, 0, stream>>>(x.ptr<uint64_t>(), x.row_stride(), rows, n,
                                                        out.ptr<uint64_t>(), out.row_stride(),
                                                        out.cols);
      break;
    default:
      GatherRowsKernel<<<blocks, kThreads, 0, stream>>>(x.ptr<uint32_t>(), x.row_stride(), rows, n,
                                                        out.ptr<uint32_t>(), out.row_stride(),
                                                        out.cols);
  }
  CheckLaunch("GatherRows");
}

void Pool(const PoolParams& p, cudaStream_t stream) {
  const int64_t n = static_cast<int64_t>(p.num_seqs) * p.out.cols;
  if (n == 0) return;
  PoolKernel<<<Blocks(n), kThreads, 0, stream>>>(
      p.hidden.data, p.hidden.dtype, p.hidden.row_stride(), p.cu_seqlens, p.num_seqs,
      p.out.ptr<float>(), p.out.row_stride(), p.out.cols, p.mode);
  CheckLaunch("Pool");
}

}  // namespace sluice::cuda
