// Helpers shared by the CUDA backend's element-wise and normalisation kernels (kernels.cu,
// norm_kernels.cu): launch shapes and checks, loads and stores of any float dtype, chunked
// 4/8/16-byte accesses, block and warp sums, the C++ type of a dtype.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "backend/backend.h"
#include "backend/cuda/convert.cuh"

namespace sluice::cuda {

constexpr int kThreads = 256;

inline void CheckLaunch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "sluice cuda: launching %s failed: %s\n", what, cudaGetErrorString(e));
    std::abort();
  }
}

// Element-wise kernels over [rows, cols] run on a 2-D grid: x covers the columns, y strides
// over the rows (no 64-bit division per element).
inline dim3 Grid2D(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, (cols + kThreads - 1) / kThreads)),
              static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535)));
}
#define SLUICE_FOR_EACH_ELEMENT(rows, cols)                                      \
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; \
  if (c >= (cols)) return;                                                       \
  for (int64_t r = blockIdx.y; r < (rows); r += gridDim.y)

inline unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + kThreads - 1) / kThreads));
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
__device__ inline float BlockSum(float v, float* shared32) {
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
struct Chunk<2> {
  using type = uint16_t;
};
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

inline bool Aligned(const void* p, size_t bytes) {
  return reinterpret_cast<uintptr_t>(p) % bytes == 0;
}

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

// Sum over the 32 lanes of a warp (xor butterfly: every lane gets the same value).
__device__ __forceinline__ float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// One warp's share of a row of 128 * NV elements: lane l holds the 4-element groups
// (i * 32 + l) * 4, i < NV, widened to fp32.
template <typename T, int NV>
__device__ __forceinline__ void LoadRowWarp(const T* row, int lane, float (&v)[NV][4]) {
#pragma unroll
  for (int i = 0; i < NV; ++i) Load<T, 4>(row + (i * 32 + lane) * 4, v[i]);
}

}  // namespace sluice::cuda
