// The CPU backend: oneDNN matmul for Linear (prepacked weights), Highway kernels with
// runtime dispatch for everything else, OpenMP for parallel loops (oneDNN uses the same
// OpenMP runtime, so there is exactly one thread team).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace sluice {

// num_threads == 0 means every core in the process's affinity mask.
StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const BackendOptions& options);

}  // namespace sluice
