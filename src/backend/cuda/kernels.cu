// Element-wise, conversion, embedding, gather and pooling kernels of the CUDA backend
// (normalisation and RoPE: norm_kernels.cu). Correctness first: simple, coalesced, deterministic
// (fixed reduction orders, no atomics), so a row's result never depends on the other rows of the
// batch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdio>
#include <cstdlib>

#include "backend/cuda/kernel_util.cuh"
#include "backend/cuda/kernels.h"

namespace sluice::cuda {
namespace {

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
    case Activation::kQuickGelu:
      return x / (1.0f + expf(-1.702f * x));
    case Activation::kNone:
      break;
  }
  return x;
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
// Other activations (GELU for GeGLU) the same way, with ApplyAct's exact arithmetic (the
// bits of GatedKernelBf16x8).
constexpr int kGatedPerThread = 2;
template <Activation kAct>
__device__ __forceinline__ float GateAct(float x) {
  if constexpr (kAct == Activation::kSilu) {
    return SiluFast(x);
  } else {
    return ApplyAct(x, kAct);
  }
}
template <Activation kAct>
__global__ void __launch_bounds__(kThreads)
    GatedBf16Kernel(const uint4* __restrict__ gu, int64_t ldg8, uint4* __restrict__ out,
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
      o[j] = __floats2bfloat162_rn(GateAct<kAct>(gf.x) * uf.x, GateAct<kAct>(gf.y) * uf.y);
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
    if ((act == Activation::kSilu || act == Activation::kGeluErf) &&
        n < (int64_t{1} << 31) - 2 * kThreads * kGatedPerThread) {
      const auto blocks = static_cast<unsigned>((n + kThreads * kGatedPerThread - 1) /
                                                (kThreads * kGatedPerThread));
      auto* kernel = act == Activation::kSilu ? GatedBf16Kernel<Activation::kSilu>
                                              : GatedBf16Kernel<Activation::kGeluErf>;
      kernel<<<blocks, kThreads, 0, stream>>>(
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
