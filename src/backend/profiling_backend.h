// A Backend decorator that times every call by kind (Linear, Attention, LayerNorm, ...),
// synchronising after each, for per-op breakdowns in benchmarks (`forward_bench
// --profile`). Not for serving: synchronising after every call costs overlap on GPUs.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace sluice {

struct OpStats {
  double seconds = 0;
  int64_t calls = 0;
  double flops = 0;  // Linear and Attention only
};

class ProfilingBackend final : public Backend {
 public:
  explicit ProfilingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  const std::map<std::string, OpStats>& stats() const { return stats_; }
  void Reset() { stats_.clear(); }
  // Markdown table of the accumulated stats, sorted by time.
  std::string Report() const;

  DeviceKind kind() const override { return inner_->kind(); }
  std::string Describe() const override { return inner_->Describe() + " [profiling]"; }
  std::string DescribeLinearWeights() const override { return inner_->DescribeLinearWeights(); }
  Buffer Allocate(DType dtype, int64_t rows, int64_t cols) override {
    return inner_->Allocate(dtype, rows, cols);
  }
  StatusOr<Buffer> Upload(const HostTensor& src, DType dtype) override {
    return inner_->Upload(src, dtype);
  }
  void CopyFromHost(const void* src, const Tensor& dst) override;
  void CopyToHostF32(const Tensor& src, float* dst) override;
  StatusOr<std::unique_ptr<LinearWeight>> PrepareLinear(const HostTensor& weight,
                                                        const HostTensor* bias,
                                                        DType dtype) override {
    return inner_->PrepareLinear(weight, bias, dtype);
  }
  void Linear(const LinearParams& p) override;
  void EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n, Tensor out,
                       bool accumulate) override;
  void LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma, const Tensor* beta,
                 float eps, Tensor out) override;
  void RmsNorm(Tensor residual, const Tensor* delta, const Tensor& weight, float eps, Tensor out,
               int group) override;
  void Rope(const RopeParams& p) override;
  void QkNormRope(const RopeParams& p, const Tensor& norm_weight, float eps) override;
  DType InnerActivationDType(DType weight_dtype) const override {
    return inner_->InnerActivationDType(weight_dtype);
  }
  DType ActivationDType(DType weight_dtype) const override {
    return inner_->ActivationDType(weight_dtype);
  }
  void Attention(const AttentionParams& p) override;
  void WriteKv(const KvWriteParams& p) override;
  void CopyKvBlocks(const KvCopyParams& p) override;
  void Sample(const SampleParams& p) override;
  void Activate(Tensor x, Activation act) override;
  void GatedActivate(const Tensor& gate_up, Activation act, Tensor out) override;
  void Add(const Tensor& a, const Tensor& b, Tensor out) override;
  void GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) override;
  void Pool(const PoolParams& p) override;
  void Synchronize() override { inner_->Synchronize(); }
  HostBuffer AllocateHost(size_t bytes) override { return inner_->AllocateHost(bytes); }
  void CopyFromHostAsync(const void* src, const Tensor& dst) override;
  void CopyToHostF32Async(const Tensor& src, float* dst) override;
  std::unique_ptr<Fence> CreateFence() override { return inner_->CreateFence(); }
  int64_t DeviceMemoryFree() override { return inner_->DeviceMemoryFree(); }
  int64_t DeviceMemoryTotal() override { return inner_->DeviceMemoryTotal(); }
  // Recordings stay unsupported: profiling synchronises after every call.

 private:
  template <typename F>
  void Time(const char* name, double flops, F&& f);

  std::unique_ptr<Backend> inner_;
  std::map<std::string, OpStats> stats_;
};

}  // namespace sluice
