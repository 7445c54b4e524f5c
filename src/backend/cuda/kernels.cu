// Element-wise, normalisation, RoPE, gather and pooling kernels of the CUDA backend.
// Correctness first: simple, coalesced, deterministic (fixed reduction orders, no atomics),
// so a row's result never depends on the other rows of the batch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>

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

__global__ void ConvertF32Kernel(const float* src, int64_t lds, int64_t rows, int64_t cols,
                                 void* dst, DType dt) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const float v = src[r * lds + c];
  switch (dt) {
    case DType::kBF16:
      static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(v);
      break;
    case DType::kF16:
      static_cast<__half*>(dst)[i] = __float2half_rn(v);
      break;
    default:
      static_cast<float*>(dst)[i] = v;
  }
}

__global__ void ToF32Kernel(const void* src, DType st, int64_t lds, int64_t rows, int64_t cols,
                            float* dst) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  dst[i] = LoadAny(src, st, r * lds + c);
}

__global__ void BiasActResidualKernel(const float* in, int64_t ldi, const float* bias,
                                      Activation act, const float* res, int64_t ldr, float* out,
                                      int64_t ldo, int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  float v = in[r * ldi + c];
  if (bias) v += bias[c];
  v = ApplyAct(v, act);
  if (res) v += res[r * ldr + c];
  out[r * ldo + c] = v;
}

__global__ void EmbeddingKernel(const void* table, DType tt, int64_t ldt, const int32_t* ids,
                                int64_t n, float* out, int64_t ldo, int64_t cols, bool acc) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const float v = LoadAny(table, tt, static_cast<int64_t>(ids[r]) * ldt + c);
  float* o = out + r * ldo + c;
  *o = acc ? *o + v : v;
}

// One block per row; three passes over global memory (sum, squared deviations, write) so
// any width works and out may alias x or residual (each element is read and written by
// the same thread).
__global__ void LayerNormKernel(const float* x, int64_t ldx, const float* res, int64_t ldr,
                                const float* gamma, const float* beta, float eps, float* out,
                                int64_t ldo, int64_t n) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * ldx;
  const float* rr = res ? res + r * ldr : nullptr;
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) s += xr[c] + (rr ? rr[c] : 0.f);
  const float mean = BlockSum(s, sh) / static_cast<float>(n);
  float q = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float d = xr[c] + (rr ? rr[c] : 0.f) - mean;
    q += d * d;
  }
  const float rstd = rsqrtf(BlockSum(q, sh) / static_cast<float>(n) + eps);
  float* o = out + r * ldo;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = xr[c] + (rr ? rr[c] : 0.f);
    o[c] = (v - mean) * rstd * gamma[c] + (beta ? beta[c] : 0.f);
  }
}

// Whole-row RMSNorm: one block per row.
__global__ void RmsNormRowKernel(float* res, int64_t ldr, const float* delta, int64_t ldd,
                                 const float* w, float eps, float* out, int64_t ldo, int64_t n) {
  __shared__ float sh[32];
  const int64_t r = blockIdx.x;
  float* x = res + r * ldr;
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    float v = x[c];
    if (delta) {
      v += delta[r * ldd + c];
      x[c] = v;
    }
    s += v * v;
  }
  const float rs = rsqrtf(BlockSum(s, sh) / static_cast<float>(n) + eps);
  float* o = out + r * ldo;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) o[c] = x[c] * rs * w[c];
}

// Grouped RMSNorm (per-head QK-norm): one warp per (row, group).
__global__ void RmsNormGroupKernel(float* res, int64_t ldr, const float* delta, int64_t ldd,
                                   const float* w, float eps, float* out, int64_t ldo, int64_t rows,
                                   int64_t groups, int g) {
  const int64_t wid = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (wid >= rows * groups) return;
  const int64_t r = wid / groups, g0 = (wid % groups) * g;
  float* x = res + r * ldr + g0;
  float s = 0.f;
  for (int c = lane; c < g; c += 32) {
    float v = x[c];
    if (delta) {
      v += delta[r * ldd + g0 + c];
      x[c] = v;
    }
    s += v * v;
  }
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
  const float rs = rsqrtf(s / static_cast<float>(g) + eps);
  float* o = out + r * ldo + g0;
  for (int c = lane; c < g; c += 32) o[c] = x[c] * rs * w[c];
}

__global__ void RopeKernel(float* x, int64_t ldx, const int32_t* pos, const float* inv_freq,
                           int64_t rows, int heads, int head_dim, int half, bool neox) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * heads * half) return;
  const int k = static_cast<int>(i % half);
  const int h = static_cast<int>((i / half) % heads);
  const int64_t t = i / (static_cast<int64_t>(half) * heads);
  // float32 angle as Hugging Face computes it; cos/sin in double for an exact rounding.
  const double ang = static_cast<double>(static_cast<float>(pos[t]) * inv_freq[k]);
  const float cs = static_cast<float>(cos(ang)), sn = static_cast<float>(sin(ang));
  float* xh = x + t * ldx + static_cast<int64_t>(h) * head_dim;
  const int a = neox ? k : 2 * k, b = neox ? k + half : 2 * k + 1;
  const float xa = xh[a], xb = xh[b];
  xh[a] = xa * cs - xb * sn;
  xh[b] = xb * cs + xa * sn;
}

__global__ void ActivateKernel(float* x, int64_t ldx, int64_t rows, int64_t cols, Activation act) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  float* p = x + (i / cols) * ldx + i % cols;
  *p = ApplyAct(*p, act);
}

__global__ void GatedKernel(const float* gu, int64_t ldg, Activation act, float* out, int64_t ldo,
                            int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  const float* g = gu + r * ldg;
  out[r * ldo + c] = ApplyAct(g[c], act) * g[cols + c];
}

__global__ void AddKernel(const float* a, int64_t lda, const float* b, int64_t ldb, float* out,
                          int64_t ldo, int64_t rows, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[r * ldo + c] = a[r * lda + c] + b[r * ldb + c];
}

template <typename T>
__global__ void GatherRowsKernel(const T* x, int64_t ldx, const int32_t* rows, int64_t n, T* out,
                                 int64_t ldo, int64_t cols) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * cols) return;
  const int64_t r = i / cols, c = i % cols;
  out[r * ldo + c] = x[static_cast<int64_t>(rows[r]) * ldx + c];
}

__global__ void PoolKernel(const float* h, int64_t ldh, const int32_t* cu, int num_seqs, float* out,
                           int64_t ldo, int64_t cols, PoolMode mode) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= num_seqs * cols) return;
  const int64_t s = i / cols, c = i % cols;
  const int b = cu[s], len = cu[s + 1] - b;
  double v = 0;
  if (len > 0) {
    switch (mode) {
      case PoolMode::kCls:
        v = h[b * ldh + c];
        break;
      case PoolMode::kLast:
        v = h[static_cast<int64_t>(b + len - 1) * ldh + c];
        break;
      case PoolMode::kMean:
        for (int r = 0; r < len; ++r) v += h[static_cast<int64_t>(b + r) * ldh + c];
        v /= len;
        break;
      case PoolMode::kMax:
        v = h[b * ldh + c];
        for (int r = 1; r < len; ++r) v = fmax(v, static_cast<double>(h[(b + r) * ldh + c]));
        break;
    }
  }
  out[s * ldo + c] = static_cast<float>(v);
}

}  // namespace

void ConvertF32(const Tensor& src, void* dst, DType dst_dtype, cudaStream_t stream) {
  const int64_t n = src.numel();
  if (n == 0) return;
  ConvertF32Kernel<<<Blocks(n), kThreads, 0, stream>>>(src.ptr<float>(), src.row_stride(), src.rows,
                                                       src.cols, dst, dst_dtype);
  CheckLaunch("ConvertF32");
}

void ToF32(const Tensor& src, float* dst, cudaStream_t stream) {
  const int64_t n = src.numel();
  if (n == 0) return;
  ToF32Kernel<<<Blocks(n), kThreads, 0, stream>>>(src.data, src.dtype, src.row_stride(), src.rows,
                                                  src.cols, dst);
  CheckLaunch("ToF32");
}

void BiasActResidual(const Tensor& in, const float* bias, Activation act, const Tensor* residual,
                     const Tensor& out, cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  BiasActResidualKernel<<<Blocks(n), kThreads, 0, stream>>>(
      in.ptr<float>(), in.row_stride(), bias, act, residual ? residual->ptr<float>() : nullptr,
      residual ? residual->row_stride() : 0, out.ptr<float>(), out.row_stride(), out.rows,
      out.cols);
  CheckLaunch("BiasActResidual");
}

void EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n, const Tensor& out,
                     bool accumulate, cudaStream_t stream) {
  if (n * out.cols == 0) return;
  EmbeddingKernel<<<Blocks(n * out.cols), kThreads, 0, stream>>>(
      table.data, table.dtype, table.row_stride(), ids, n, out.ptr<float>(), out.row_stride(),
      out.cols, accumulate);
  CheckLaunch("EmbeddingGather");
}

void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor* beta,
               float eps, const Tensor& out, cudaStream_t stream) {
  if (x.rows == 0) return;
  LayerNormKernel<<<static_cast<unsigned>(x.rows), kThreads, 0, stream>>>(
      x.ptr<float>(), x.row_stride(), residual ? residual->ptr<float>() : nullptr,
      residual ? residual->row_stride() : 0, gamma.ptr<float>(),
      beta ? beta->ptr<float>() : nullptr, eps, out.ptr<float>(), out.row_stride(), x.cols);
  CheckLaunch("LayerNorm");
}

void RmsNorm(const Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
             const Tensor& out, int group, cudaStream_t stream) {
  if (residual.rows == 0) return;
  const float* d = delta ? delta->ptr<float>() : nullptr;
  const int64_t ldd = delta ? delta->row_stride() : 0;
  if (group <= 0 || group >= residual.cols) {
    RmsNormRowKernel<<<static_cast<unsigned>(residual.rows), kThreads, 0, stream>>>(
        residual.ptr<float>(), residual.row_stride(), d, ldd, weight.ptr<float>(), eps,
        out.ptr<float>(), out.row_stride(), residual.cols);
  } else {
    const int64_t groups = residual.cols / group;
    RmsNormGroupKernel<<<Blocks(residual.rows * groups * 32), kThreads, 0, stream>>>(
        residual.ptr<float>(), residual.row_stride(), d, ldd, weight.ptr<float>(), eps,
        out.ptr<float>(), out.row_stride(), residual.rows, groups, group);
  }
  CheckLaunch("RmsNorm");
}

void Rope(const RopeParams& p, const float* inv_freq, cudaStream_t stream) {
  const int rot = p.rotary_dim > 0 ? p.rotary_dim : p.head_dim;
  const int half = rot / 2;
  const int64_t n = p.x.rows * p.num_heads * half;
  if (n == 0) return;
  RopeKernel<<<Blocks(n), kThreads, 0, stream>>>(p.x.ptr<float>(), p.x.row_stride(), p.positions,
                                                 inv_freq, p.x.rows, p.num_heads, p.head_dim, half,
                                                 p.style == RopeStyle::kNeox);
  CheckLaunch("Rope");
}

void Activate(const Tensor& x, Activation act, cudaStream_t stream) {
  if (x.numel() == 0 || act == Activation::kNone) return;
  ActivateKernel<<<Blocks(x.numel()), kThreads, 0, stream>>>(x.ptr<float>(), x.row_stride(), x.rows,
                                                             x.cols, act);
  CheckLaunch("Activate");
}

void GatedActivate(const Tensor& gate_up, Activation act, const Tensor& out, cudaStream_t stream) {
  if (out.numel() == 0) return;
  GatedKernel<<<Blocks(out.numel()), kThreads, 0, stream>>>(
      gate_up.ptr<float>(), gate_up.row_stride(), act, out.ptr<float>(), out.row_stride(), out.rows,
      out.cols);
  CheckLaunch("GatedActivate");
}

void Add(const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream) {
  if (out.numel() == 0) return;
  AddKernel<<<Blocks(out.numel()), kThreads, 0, stream>>>(
      a.ptr<float>(), a.row_stride(), b.ptr<float>(), b.row_stride(), out.ptr<float>(),
      out.row_stride(), out.rows, out.cols);
  CheckLaunch("Add");
}

void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, const Tensor& out,
                cudaStream_t stream) {
  if (n * out.cols == 0) return;
  const unsigned blocks = Blocks(n * out.cols);
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
  PoolKernel<<<Blocks(n), kThreads, 0, stream>>>(p.hidden.ptr<float>(), p.hidden.row_stride(),
                                                 p.cu_seqlens, p.num_seqs, p.out.ptr<float>(),
                                                 p.out.row_stride(), p.out.cols, p.mode);
  CheckLaunch("Pool");
}

}  // namespace sluice::cuda
