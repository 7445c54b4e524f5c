// Scalar reference implementations of every CPU kernel: plain loops, double accumulation,
// no SIMD and no threads. Used only by tests to check the optimised kernels. Same
// semantics and argument conventions as backend.h / kernels.h / attention.h.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace sluice::cpu::ref {

double Act(double x, Activation act);

// out[M, N] = act(x[M, K] * w[N, K]^T + b) (+ residual). Dense row-major; b/residual may be
// null. out may alias residual.
void Linear(const float* x, int64_t m, int64_t k, const float* w, const float* b, int64_t n,
            Activation act, const float* residual, float* out);

void Activate(const Tensor& x, Activation act);
void GatedActivate(const Tensor& gate_up, Activation act, const Tensor& out);
void Add(const Tensor& a, const Tensor& b, const Tensor& out);
void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor* beta,
               float eps, const Tensor& out);
void RmsNorm(const Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
             const Tensor& out, int group);
void Rope(const RopeParams& p);
void Attention(const AttentionParams& p);
void EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n, const Tensor& out,
                     bool accumulate);
void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, const Tensor& out);
void Pool(const PoolParams& p);

}  // namespace sluice::cpu::ref
