// Shared helpers of the CUDA backend tests: seeded random inputs, host rounding to a
// half dtype, and element-wise comparison with an absolute + relative tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../backend/test_util.h"
#include "backend/backend.h"
#include "core/dtype.h"

namespace sluice::cuda_test {

using testing::Random;  // seeded uniform inputs, shared with the CPU backend tests

// RoPE over `heads` heads of `dim` of x (columns from its first), positions from pos.
inline RopeParams RopeOf(const Tensor& x, const Tensor& pos, int heads, int dim, int rotary_dim,
                         double theta, RopeStyle style, int max_position = 0) {
  RopeParams p;
  p.x = x;
  p.positions = pos.ptr<int32_t>();
  p.num_heads = heads;
  p.head_dim = dim;
  p.rotary_dim = rotary_dim;
  p.theta = theta;
  p.style = style;
  p.max_position = max_position;
  return p;
}

// v rounded to dt (bf16/f16, nearest even) and widened back; f32 unchanged.
inline std::vector<float> Rounded(const std::vector<float>& v, DType dt) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    r[i] = dt == DType::kBF16  ? BF16ToF32(F32ToBF16(v[i]))
           : dt == DType::kF16 ? F16ToF32(F32ToF16(v[i]))
                               : v[i];
  }
  return r;
}

// Max over elements of |a - b| / (atol + rtol |b|); <= 1 is within tolerance.
inline double ErrRatio(const std::vector<float>& a, const std::vector<float>& b, double atol,
                       double rtol) {
  if (a.size() != b.size()) return INFINITY;
  return testing::ErrRatio(a.data(), b.data(), a.size(), atol, rtol);
}

inline double MaxAbs(const std::vector<float>& a, const std::vector<float>& b) {
  return testing::MaxAbsDiff(a.data(), b.data(), std::min(a.size(), b.size()));
}

// An attention test case: q, k and v are column blocks of one fused [T, q + 2 kv] matrix.
struct AttnCase {
  int heads, kv_heads, dim;
  bool causal;
  int window;
};

inline AttentionParams AttnParams(Tensor qkv, Tensor out, const int32_t* cu, int num_seqs,
                                  int max_len, const AttnCase& ac) {
  const int qw = ac.heads * ac.dim, kw = ac.kv_heads * ac.dim;
  AttentionParams p;
  p.q = qkv.ColSlice(0, qw);
  p.k = qkv.ColSlice(qw, kw);
  p.v = qkv.ColSlice(qw + kw, kw);
  p.out = out;
  p.cu_seqlens = cu;
  p.num_seqs = num_seqs;
  p.max_seqlen = max_len;
  p.num_heads = ac.heads;
  p.num_kv_heads = ac.kv_heads;
  p.head_dim = ac.dim;
  p.scale = 1.f / std::sqrt(static_cast<float>(ac.dim));
  p.causal = ac.causal;
  p.window = ac.window;
  return p;
}

}  // namespace sluice::cuda_test

#define EXPECT_NEAR_ALL(a, b, atol, rtol)                                 \
  EXPECT_LE(::sluice::cuda_test::ErrRatio((a), (b), (atol), (rtol)), 1.0) \
      << "max |diff| " << ::sluice::cuda_test::MaxAbs((a), (b))
