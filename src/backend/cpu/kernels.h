// CPU element-wise, normalisation, RoPE, gather and pooling kernels (Highway SIMD with
// runtime dispatch; OpenMP across rows). Every output row is computed by the same code
// path in the same order whatever the batch or thread count, so results are batch
// invariant and deterministic. Semantics match backend.h. Activations are f32; Rope,
// GatedActivate and LayerNorm's output also take bf16 (InnerActivationDType): rows widened,
// computed in f32, rounded once.
// Attention lives in attention.h.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend.h"

namespace sluice::cpu {

// Name of the Highway target chosen at run time (e.g. "AVX3_ZEN4").
std::string SimdTargetName();

void ActivateKernel(const Tensor& x, Activation act);
void GatedActivateKernel(const Tensor& gate_up, Activation act, const Tensor& out);
void AddKernel(const Tensor& a, const Tensor& b, const Tensor& out);
void LayerNormKernel(const Tensor& x, const Tensor* residual, const Tensor& gamma,
                     const Tensor* beta, float eps, const Tensor& out);
void RmsNormKernel(const Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
                   const Tensor& out, int group);
// inv_freq[i] = 1 / theta^(2i / rotary_dim) in float32, cos/sin of the float32 product
// pos * inv_freq (as Hugging Face computes them). rotary_dim <= 1024.
void RopeKernel(const RopeParams& p);
// ids must be in [0, table.rows); an out-of-range id reads nothing (its row is zeroed, or
// left unchanged when accumulating).
void EmbeddingGatherKernel(const Tensor& table, const int32_t* ids, int64_t n, const Tensor& out,
                           bool accumulate);
void GatherRowsKernel(const Tensor& x, const int32_t* rows, int64_t n, const Tensor& out);
// One row converted: bf16 -> f32 (exact) / f32 -> bf16 (nearest even, NaN kept: F32ToBF16's
// bits), SIMD.
void WidenRowBf16(const uint16_t* src, float* dst, int64_t n);
void NarrowRowBf16(const float* src, uint16_t* dst, int64_t n);
// Empty sequences pool to zeros. MEAN divides the f32 sum by the length.
void PoolKernel(const PoolParams& p);

}  // namespace sluice::cpu
