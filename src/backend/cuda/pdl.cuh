// Programmatic dependent launch (Hopper): a kernel launched with LaunchPdl may start while
// the kernel before it on the stream is still running (also inside CUDA graphs, where stream
// capture turns it into a programmatic edge), so its launch, its blocks' set-up and whatever
// it reads that no earlier kernel writes (weights) overlap the previous kernel's tail.
//
// Contract for a kernel launched with LaunchPdl: it calls PdlWait() before it reads anything
// an earlier kernel of the stream writes and before it writes anything (an earlier kernel may
// still read it). PdlWait returns once every earlier kernel has completed and its memory is
// visible, so dependencies stay transitive. PdlTrigger() lets the next PDL kernel launch
// before this one finishes (its blocks then wait in PdlWait, holding no data dependency).
// Kernels launched without the attribute behave as usual; PdlWait/PdlTrigger are no-ops
// for them. SLUICE_CUDA_PDL=0 launches everything without the attribute (A/B runs).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "backend/cuda/kernel_util.cuh"

namespace sluice::cuda {

__device__ __forceinline__ void PdlWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void PdlTrigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

inline bool PdlEnabled() {
  static const bool on = [] {
    const char* e = std::getenv("SLUICE_CUDA_PDL");
    return !(e != nullptr && std::strcmp(e, "0") == 0);
  }();
  return on;
}

// kernel<<<grid, block, smem, stream>>>(args...), with the programmatic-serialisation
// attribute when PdlEnabled(). `what` names the kernel in launch errors.
template <typename... KArgs, typename... Args>
void LaunchPdl(const char* what, void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
               cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = PdlEnabled() ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "sluice cuda: launching %s failed: %s\n", what, cudaGetErrorString(e));
    std::abort();
  }
}

}  // namespace sluice::cuda
