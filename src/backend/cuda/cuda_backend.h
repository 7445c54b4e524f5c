// The CUDA backend: the Backend interface on one NVIDIA GPU (cuBLASLt GEMMs plus the
// kernels in kernels.cu, norm_kernels.cu, attention.cu, attention_tc.cu). Built only with
// -DSLUICE_CUDA=ON; backend.cc dispatches DeviceKind::kCuda here.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace sluice {

// Fails (Unavailable/Internal) when no usable CUDA device is present.
StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const BackendOptions& options);

// Number of CUDA devices visible to this process (0 when there is no driver or device).
int CudaDeviceCount();

}  // namespace sluice
