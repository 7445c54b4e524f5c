// Shared helpers of the CUDA backend tests: seeded random inputs, host rounding to a
// half dtype, and element-wise comparison with an absolute + relative tolerance.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../backend/test_util.h"
#include "core/dtype.h"

namespace sluice::cuda_test {

using testing::Random;  // seeded uniform inputs, shared with the CPU backend tests

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

}  // namespace sluice::cuda_test

#define EXPECT_NEAR_ALL(a, b, atol, rtol)                                 \
  EXPECT_LE(::sluice::cuda_test::ErrRatio((a), (b), (atol), (rtol)), 1.0) \
      << "max |diff| " << ::sluice::cuda_test::MaxAbs((a), (b))
