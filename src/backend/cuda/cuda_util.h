// Error checks and small helpers shared by the CUDA backend's host code (cuda_backend.cc,
// gemm_planner.cc). CUDA and cuBLAS errors abort with the failing call and its location:
// the backend interface's ops return void.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace sluice::cuda {

inline void CudaCheck(cudaError_t e, const char* expr, const char* file, int line) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "sluice cuda: %s failed (%s:%d): %s\n", expr, file, line,
               cudaGetErrorString(e));
  std::abort();
}
inline void BlasCheck(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  std::fprintf(stderr, "sluice cuda: %s failed (%s:%d): cublas status %d\n", expr, file, line,
               static_cast<int>(s));
  std::abort();
}

#define CUDA_OK(x) ::sluice::cuda::CudaCheck((x), #x, __FILE__, __LINE__)
#define BLAS_OK(x) ::sluice::cuda::BlasCheck((x), #x, __FILE__, __LINE__)

inline cudaDataType_t CudaType(DType t) {
  switch (t) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// Device scratch that grows on demand (cudaFree synchronises, so no in-flight user remains).
// Once a recording may reference it (`keep`), an outgrown buffer is kept alive instead.
class Scratch {
 public:
  void* Get(size_t bytes, bool keep) {
    if (bytes > cap_) {
      if (keep && mem_) retired_.push_back(std::move(mem_));
      mem_.reset();
      void* p = nullptr;
      cap_ = std::max(bytes, cap_ + cap_ / 4);
      CUDA_OK(cudaMalloc(&p, cap_));
      mem_ = std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
    }
    return mem_.get();
  }

 private:
  std::shared_ptr<void> mem_;
  std::vector<std::shared_ptr<void>> retired_;
  size_t cap_ = 0;
};

}  // namespace sluice::cuda
