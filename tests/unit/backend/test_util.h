// Helpers shared by the CPU backend tests.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_backend.h"

namespace sluice::testing {

inline std::unique_ptr<Backend> MakeCpu(int threads = 2) {
  auto b = CreateCpuBackend(BackendOptions{DeviceKind::kCpu, 0, threads});
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return std::move(b).value();
}

inline std::vector<float> Random(size_t n, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(g);
  return v;
}

// bf16 (round to nearest even) of every value, and back (exact).
inline std::vector<uint16_t> ToBf16(const std::vector<float>& v) {
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = F32ToBF16(v[i]);
  return h;
}
inline std::vector<float> FromBf16(const std::vector<uint16_t>& h) {
  std::vector<float> v(h.size());
  for (size_t i = 0; i < h.size(); ++i) v[i] = BF16ToF32(h[i]);
  return v;
}

inline Tensor View(std::vector<float>& v, int64_t rows, int64_t cols, int64_t stride = 0) {
  return Tensor{v.data(), DType::kF32, rows, cols, stride};
}

// Max over elements of |a - b| / (atol + rtol * |b|); <= 1 means within tolerance.
inline double ErrRatio(const float* a, const float* b, size_t n, double atol, double rtol) {
  double worst = 0;
  for (size_t i = 0; i < n; ++i) {
    const double e = std::fabs(static_cast<double>(a[i]) - b[i]) / (atol + rtol * std::fabs(b[i]));
    if (!(e <= worst)) worst = e;  // NaN propagates as failure
  }
  return worst;
}

inline double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - b[i]));
  return m;
}

#define EXPECT_CLOSE(a, b, n, atol, rtol) \
  EXPECT_LE(::sluice::testing::ErrRatio((a), (b), (n), (atol), (rtol)), 1.0)

}  // namespace sluice::testing
