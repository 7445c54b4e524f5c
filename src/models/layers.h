// Shared building blocks for architecture files: weight loading helpers and the
// activation-name mapping. Each architecture file (bert.cc, qwen3.cc) composes these.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "weights/safetensors.h"

namespace sluice {

// Loads the weights of a model from a store under a fixed prefix, checking shapes.
class WeightLoader {
 public:
  WeightLoader(const WeightStore& store, Backend* backend, std::string prefix, DType dtype)
      : store_(store), backend_(backend), prefix_(std::move(prefix)), dtype_(dtype) {}

  // nn.Linear at `name` ("name.weight" [out, in], "name.bias" [out] if bias).
  StatusOr<std::unique_ptr<LinearWeight>> Linear(const std::string& name, int64_t out, int64_t in,
                                                 bool bias);
  // Several nn.Linear layers with the same input fused along the output dimension
  // (e.g. Q, K, V -> one GEMM). All have bias or none.
  StatusOr<std::unique_ptr<LinearWeight>> FusedLinear(const std::vector<std::string>& names,
                                                      const std::vector<int64_t>& outs, int64_t in,
                                                      bool bias);
  // A 1-D parameter (norm weight/bias) as f32 [1, n].
  StatusOr<Buffer> Vector(const std::string& name, int64_t n);
  // A 1-D parameter under the first name that exists (e.g. LayerNorm.weight / .gamma).
  StatusOr<Buffer> VectorAny(const std::vector<std::string>& names, int64_t n);
  // An embedding table [rows, cols] in the compute dtype (f32 when the linear layers are
  // int8: only nn.Linear weights are quantised).
  StatusOr<Buffer> Table(const std::string& name, int64_t rows, int64_t cols);
  bool Has(const std::string& name) const { return store_.Has(prefix_ + name); }

 private:
  const WeightStore& store_;
  Backend* backend_;
  std::string prefix_;
  DType dtype_;
};

// The dtype of a model's tensors other than its linear layers' weights (embedding tables,
// output heads) when the linear layers compute in `linear`: int8 covers the linear layers
// only, everything else stays f32.
inline DType NonLinearDType(DType linear) { return linear == DType::kI8 ? DType::kF32 : linear; }

// AttentionParams::products for a model whose linear layers compute in `linear`: bf16
// models multiply in bf16 (transformers' bf16 path), and so do int8 models (where the
// backend has a faster bf16 path: AMX on CPU; ONNX Runtime's dynamic quantisation lowers
// the attention products to int8); f32 models in f32.
inline DType AttentionProducts(DType linear) {
  return linear == DType::kBF16 || linear == DType::kI8 ? DType::kBF16 : DType::kF32;
}

// Maps a transformers activation name (hidden_act) to a backend activation.
StatusOr<Activation> ParseActivation(const std::string& hidden_act);

}  // namespace sluice
