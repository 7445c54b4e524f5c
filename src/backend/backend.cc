#include "backend/backend.h"

#include "backend/cpu/cpu_backend.h"
#ifdef SLUICE_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace sluice {

Tensor Tensor::RowSlice(int64_t r0, int64_t n) const {
  Tensor t = *this;
  t.data = static_cast<char*>(data) + r0 * row_stride() * static_cast<int64_t>(DTypeSize(dtype));
  t.rows = n;
  return t;
}

Tensor Tensor::ColSlice(int64_t c0, int64_t n) const {
  Tensor t = *this;
  t.data = static_cast<char*>(data) + c0 * static_cast<int64_t>(DTypeSize(dtype));
  t.stride = row_stride();
  t.cols = n;
  return t;
}

StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& options) {
  switch (options.device) {
    case DeviceKind::kCpu:
      return CreateCpuBackend(options);
    case DeviceKind::kCuda:
#ifdef SLUICE_HAVE_CUDA
      return CreateCudaBackend(options);
#else
      return Unsupported("this build of sluice has no CUDA backend (build with -DSLUICE_CUDA=ON)");
#endif
  }
  return Internal("unknown device kind");
}

}  // namespace sluice
