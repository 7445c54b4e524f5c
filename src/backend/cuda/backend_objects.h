// The CUDA backend's small objects (cuda_backend.cc): its linear weights, fences (CUDA events)
// and recordings (CUDA graph segments), and the load-time host conversion between float
// dtypes. Internal to the backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_util.h"
#include "core/dtype.h"

namespace sluice::cuda {

inline bool IsFloat(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

// Host-side conversion between float dtypes (load time only).
inline void ConvertHost(const void* src, DType sdt, void* dst, DType ddt, int64_t n) {
  if (sdt == ddt) {
    std::memcpy(dst, src, static_cast<size_t>(n) * DTypeSize(sdt));
    return;
  }
  const auto* s16 = static_cast<const uint16_t*>(src);
  const auto* s32 = static_cast<const float*>(src);
  auto* d16 = static_cast<uint16_t*>(dst);
  auto* d32 = static_cast<float*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    const float v = sdt == DType::kBF16  ? BF16ToF32(s16[i])
                    : sdt == DType::kF16 ? F16ToF32(s16[i])
                                         : s32[i];
    if (ddt == DType::kF32) {
      d32[i] = v;
    } else {
      d16[i] = ddt == DType::kBF16 ? F32ToBF16(v) : F32ToF16(v);
    }
  }
}

inline int Alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  int al = 256;
  while (al > 1 && a % al != 0) al /= 2;
  return al;
}

class CudaLinearWeight final : public LinearWeight {
 public:
  Buffer w;          // [N, K] in dtype
  Buffer bias;       // [1, N] f32 or empty
  Buffer bias_half;  // [1, N] in dtype when dtype is bf16/f16: the epilogue's bias for
                     // outputs in dtype (as transformers adds it in a half model)
};

// A fence: a CUDA event recorded on the backend's stream.
class CudaFence final : public Fence {
 public:
  CudaFence(int device, cudaStream_t stream) : device_(device), stream_(stream) {
    CUDA_OK(cudaSetDevice(device_));
    CUDA_OK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming));
  }
  ~CudaFence() override {
    cudaSetDevice(device_);
    cudaEventDestroy(event_);
  }
  void Record() override {
    CUDA_OK(cudaSetDevice(device_));
    CUDA_OK(cudaEventRecord(event_, stream_));
  }
  // An event never recorded counts as complete.
  void Wait() override { CUDA_OK(cudaEventSynchronize(event_)); }
  bool Done() override {
    CUDA_OK(cudaSetDevice(device_));
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    CUDA_OK(e);
    return true;
  }

 private:
  int device_;
  cudaStream_t stream_;
  cudaEvent_t event_ = nullptr;
};

// A recorded forward: graph segments (instantiated CUDA graphs) and, between them, the
// attention calls that run eagerly on replay.
class CudaRecording final : public Recording {
 public:
  struct Step {
    cudaGraphExec_t exec = nullptr;  // a graph segment, or
    AttentionParams attention;       // (exec == nullptr) an attention call
  };
  ~CudaRecording() override {
    for (auto& s : steps) {
      if (s.exec) cudaGraphExecDestroy(s.exec);
    }
  }
  int graph_segments() const override {
    int n = 0;
    for (const auto& s : steps) n += s.exec != nullptr;
    return n;
  }
  int attention_calls() const override { return static_cast<int>(steps.size()) - graph_segments(); }
  std::vector<Step> steps;
};

}  // namespace sluice::cuda
