// The CPU backend: oneDNN matmul for Linear (prepacked weights), Highway kernels with
// runtime dispatch for everything else, OpenMP for parallel loops (oneDNN uses the same
// OpenMP runtime, so there is exactly one thread team). Every call sets the team size
// (omp_set_num_threads is per calling thread). Upload always copies: a Buffer never aliases
// the host tensor, so checkpoint memory may be unmapped after loading.
#pragma once

#include <memory>

#include "backend/backend.h"

namespace sluice {

// num_threads == 0 means every core in the process's affinity mask.
StatusOr<std::unique_ptr<Backend>> CreateCpuBackend(const BackendOptions& options);

}  // namespace sluice
