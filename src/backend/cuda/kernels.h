// Launchers for the CUDA backend's kernels (kernels.cu, norm_kernels.cu, attention.cu,
// attention_tc.cu). Plain C++ so that host code compiled by the C++ compiler can call them. All
// pointers in Tensors and the int32 index arrays are device pointers; everything is queued on
// `stream`.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/backend.h"

namespace sluice::cuda {

// Float tensors (f32/bf16/f16) may be in any of the three dtypes wherever a launcher takes
// a Tensor; arithmetic is fp32 and results are rounded (nearest even) once when stored.

// dst[r, c] = convert(src[r, c]) for a [rows, cols] (possibly strided) source into a dense
// destination of dst_dtype.
void Convert(const Tensor& src, void* dst, DType dst_dtype, cudaStream_t stream);
// Any float dtype (strided) -> dense f32.
void ToF32(const Tensor& src, float* dst, cudaStream_t stream);

// out = act(out + bias) + residual, element-wise over [rows, cols] (bias/residual optional;
// in may differ from out: out = act(in + bias) + residual).
void BiasActResidual(const Tensor& in, const float* bias, Activation act, const Tensor* residual,
                     const Tensor& out, cudaStream_t stream);

void EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n, const Tensor& out,
                     bool accumulate, cudaStream_t stream);
void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor* beta,
               float eps, const Tensor& out, cudaStream_t stream);
void RmsNorm(const Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
             const Tensor& out, int group, cudaStream_t stream);
// inv_freq: device array of rotary_dim / 2 floats (computed on the host as HF does).
// table: optional device [max_position, rotary_dim / 2] (cos, sin) pairs of the same angles.
void Rope(const RopeParams& p, const float* inv_freq, const float2* table, cudaStream_t stream);
// Per-head RMSNorm then RoPE, fused (one rounding). False if head_dim > kMaxHeadDim.
bool QkNormRope(const RopeParams& p, const Tensor& norm_weight, float eps, const float* inv_freq,
                const float2* table, cudaStream_t stream);
void Activate(const Tensor& x, Activation act, cudaStream_t stream);
void GatedActivate(const Tensor& gate_up, Activation act, const Tensor& out, cudaStream_t stream);
void Add(const Tensor& a, const Tensor& b, const Tensor& out, cudaStream_t stream);
void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, const Tensor& out,
                cudaStream_t stream);
void Pool(const PoolParams& p, cudaStream_t stream);

// Variable-length attention (attention.cu). q/k/v/out share one float dtype. bf16/f16 with
// head_dim 32, 64 or 128 (16-byte aligned rows) run on tensor cores; everything else on
// the fp32 CUDA-core kernels. Returns false for unsupported arguments (head_dim >
// kMaxHeadDim, mixed dtypes).
constexpr int kMaxHeadDim = 256;
bool Attention(const AttentionParams& p, cudaStream_t stream);
// The tensor-core kernel (attention_tc.cu): bf16/f16 q/k/v with head_dim 32, 64 or 128, rows
// 16-byte aligned. AttentionTc runs it where AttentionTcEligible(p) (false if the kernel
// cannot be configured).
bool AttentionTcEligible(const AttentionParams& p);
bool AttentionTc(const AttentionParams& p, cudaStream_t stream);
// The same kernel with a grid fixed by p.q.rows, which finds each block's sequence from the
// device arrays (p.seq_capacity > 0): a recording captures it and every replay computes the
// batch it holds, bit for bit as AttentionTc. False (nothing launched) where it does not
// apply: no seq_capacity, the paged KV cache, f32, or not AttentionTcEligible.
bool AttentionTcGraph(const AttentionParams& p, cudaStream_t stream);

// Skinny GEMM for decode batches (gemv.cu): out[m, n] = sum_k w[n, k] x[m, k] (+ bias[n])
// (+ residual[m, n]) for 1 <= m <= kGemvMaxRows rows of bf16/f16 weights and activations (x in
// the weight dtype), output f32 or the weight dtype (residual in the output's dtype; out
// may alias it). Streams the weights near the memory bandwidth where cuBLASLt does not.
// Optional fused steps (LinearBlockParams' semantics, with the unfused kernels' roundings):
//   norm_weight: x is a residual stream (f32 or the weight dtype) and the GEMM's input is
//     RMSNorm(x) * norm_weight rounded to the weight dtype, with the arithmetic RmsNorm uses
//     for such rows (its warp kernel where RmsNormWarpColumns(k), else its row kernel);
//   gate = kSilu: w stacks [W_gate; W_up] (n rows, n even) and out [m, n / 2] =
//     SiLU(gate) * up, each rounded to the weight dtype first (as the GEMM output it replaces).
// Launched with programmatic dependent launch (pdl.cuh).
constexpr int kGemvMaxRows = 4;
struct GemvParams {
  const void* w = nullptr;  // [n, k], row-major, 16-byte aligned
  DType w_dtype = DType::kBF16;
  int64_t m = 0, n = 0, k = 0;
  const void* x = nullptr;  // [m, k], row stride ldx; w_dtype (or f32 with norm_weight)
  DType x_dtype = DType::kBF16;
  int64_t ldx = 0;
  const float* norm_weight = nullptr;  // [k] or null
  float eps = 1e-6f;
  Activation gate = Activation::kNone;
  const float* bias = nullptr;  // [n] or null
  const void* residual = nullptr;
  int64_t ldr = 0;
  void* out = nullptr;
  int64_t ldo = 0;
  DType out_dtype = DType::kF32;
};
bool GemvEligible(const GemvParams& p);
int GemvSplits(int64_t n, int64_t k);
void Gemv(const GemvParams& p, cudaStream_t stream);
// True when RmsNorm takes its one-warp-per-row path for rows of `cols` columns (the
// numerics GemvParams::norm_weight reproduces).
bool RmsNormWarpColumns(int64_t cols);

// The attention inputs of a paged decoder layer in one kernel (norm_kernels.cu): QK-norm (if
// given) + neox RoPE of q (in place) and k, k and v written to the cache rows. False (nothing
// launched) unless rotary_dim == head_dim in {32, 64, 128}, neox style, rows aligned.
bool AttentionInputs(const AttentionInputParams& p, const float* inv_freq, const float2* table,
                     cudaStream_t stream);

// Decode attention (attention_decode.cu): paged, one query per sequence, split over the keys.
bool DecodeAttentionEligible(const AttentionParams& p);
int DecodeAttentionSplits(const AttentionParams& p, int num_sms);
size_t DecodeAttentionScratch(const AttentionParams& p, int splits);
// counters: [num_seqs * num_kv_heads] ints, zero before the first call (each call leaves them
// zero); null runs the two-kernel variant (split, then merge).
bool DecodeAttention(const AttentionParams& p, int splits, float* scratch, int* counters,
                     cudaStream_t stream);

// Paged KV cache writes and sampling (sampling.cu). rows/adjusts/adj_raw/out: device
// memory (adj_raw: p.num_adjusts floats of scratch).
void WriteKv(const KvWriteParams& p, cudaStream_t stream);
void Sample(const SampleParams& p, const SamplingRow* rows, const SamplingAdjust* adjusts,
            float* adj_raw, const uint32_t* masks, const int32_t* allowed, float* allowed_vals,
            SampledToken* out, cudaStream_t stream);

}  // namespace sluice::cuda
