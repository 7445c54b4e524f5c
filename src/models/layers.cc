#include "models/layers.h"

#include <cstring>

namespace sluice {

StatusOr<std::unique_ptr<LinearWeight>> WeightLoader::Linear(const std::string& name, int64_t out,
                                                             int64_t in, bool bias) {
  return FusedLinear({name}, {out}, in, bias);
}

StatusOr<std::unique_ptr<LinearWeight>> WeightLoader::FusedLinear(
    const std::vector<std::string>& names, const std::vector<int64_t>& outs, int64_t in,
    bool bias) {
  std::vector<HostTensor> ws, bs;
  for (size_t i = 0; i < names.size(); ++i) {
    ASSIGN_OR_RETURN(HostTensor w, store_.Get(prefix_ + names[i] + ".weight", {outs[i], in}));
    ws.push_back(w);
    if (bias) {
      ASSIGN_OR_RETURN(HostTensor b, store_.Get(prefix_ + names[i] + ".bias", {outs[i]}));
      bs.push_back(b);
    }
  }
  if (names.size() == 1) return backend_->PrepareLinear(ws[0], bias ? &bs[0] : nullptr, dtype_);
  // Concatenate along the output dimension in the checkpoint dtype (host, load time only).
  int64_t total = 0;
  for (auto o : outs) total += o;
  for (size_t i = 1; i < ws.size(); ++i) {
    if (ws[i].dtype != ws[0].dtype) {
      return FailedPrecondition("cannot fuse " + ws[0].name + " and " + ws[i].name +
                                ": stored in different dtypes");
    }
  }
  const size_t esz = DTypeSize(ws[0].dtype);
  std::vector<uint8_t> wcat(static_cast<size_t>(total * in) * esz);
  std::vector<uint8_t> bcat(bias ? static_cast<size_t>(total) * DTypeSize(bs[0].dtype) : 0);
  size_t woff = 0, boff = 0;
  for (size_t i = 0; i < ws.size(); ++i) {
    const size_t wn = static_cast<size_t>(outs[i] * in) * esz;
    std::memcpy(wcat.data() + woff, ws[i].data, wn);
    woff += wn;
    if (bias) {
      if (bs[i].dtype != bs[0].dtype) return FailedPrecondition("fused biases differ in dtype");
      const size_t bn = static_cast<size_t>(outs[i]) * DTypeSize(bs[i].dtype);
      std::memcpy(bcat.data() + boff, bs[i].data, bn);
      boff += bn;
    }
  }
  HostTensor w{wcat.data(), ws[0].dtype, {total, in}, ws[0].name + " (fused)"};
  HostTensor b;
  if (bias) b = HostTensor{bcat.data(), bs[0].dtype, {total}, bs[0].name + " (fused)"};
  return backend_->PrepareLinear(w, bias ? &b : nullptr, dtype_);
}

StatusOr<Buffer> WeightLoader::Vector(const std::string& name, int64_t n) {
  ASSIGN_OR_RETURN(HostTensor t, store_.Get(prefix_ + name, {n}));
  return backend_->Upload(t, DType::kF32);
}

StatusOr<Buffer> WeightLoader::VectorAny(const std::vector<std::string>& names, int64_t n) {
  for (const auto& name : names) {
    if (store_.Has(prefix_ + name)) return Vector(name, n);
  }
  return NotFound("none of the tensors " + prefix_ + names[0] + " (or its aliases) found in " +
                  store_.description());
}

StatusOr<Buffer> WeightLoader::Table(const std::string& name, int64_t rows, int64_t cols) {
  ASSIGN_OR_RETURN(HostTensor t, store_.Get(prefix_ + name, {rows, cols}));
  return backend_->Upload(t, NonLinearDType(dtype_));
}

StatusOr<Activation> ParseActivation(const std::string& a) {
  if (a == "gelu" || a == "gelu_python") return Activation::kGeluErf;
  if (a == "gelu_new" || a == "gelu_pytorch_tanh" || a == "gelu_fast") return Activation::kGeluTanh;
  if (a == "silu" || a == "swish") return Activation::kSilu;
  if (a == "relu") return Activation::kRelu;
  if (a == "quick_gelu") return Activation::kQuickGelu;
  return Unsupported("activation \"" + a +
                     "\" is not supported (supported: gelu, gelu_new, gelu_pytorch_tanh, "
                     "silu, swish, relu, quick_gelu)");
}

}  // namespace sluice
