#include "backend/profiling_backend.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

namespace sluice {

template <typename F>
void ProfilingBackend::Time(const char* name, double flops, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  inner_->Synchronize();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  OpStats& st = stats_[name];
  st.seconds += s;
  st.calls += 1;
  st.flops += flops;
}

std::string ProfilingBackend::Report() const {
  std::vector<std::pair<std::string, OpStats>> rows(stats_.begin(), stats_.end());
  std::sort(rows.begin(), rows.end(),
            [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& r : rows) total += r.second.seconds;
  std::string out = "| op | calls | seconds | share | GFLOP/s |\n|---|---|---|---|---|\n";
  char buf[256];
  for (const auto& [name, st] : rows) {
    std::snprintf(
        buf, sizeof buf, "| %s | %lld | %.3f | %.1f%% | %s |\n", name.c_str(),
        static_cast<long long>(st.calls), st.seconds, total > 0 ? 100.0 * st.seconds / total : 0.0,
        st.flops > 0 ? std::to_string(static_cast<int>(st.flops / st.seconds / 1e9)).c_str() : "");
    out += buf;
  }
  return out;
}

void ProfilingBackend::CopyFromHost(const void* src, const Tensor& dst) {
  Time("CopyFromHost", 0, [&] { inner_->CopyFromHost(src, dst); });
}
void ProfilingBackend::CopyToHostF32(const Tensor& src, float* dst) {
  Time("CopyToHostF32", 0, [&] { inner_->CopyToHostF32(src, dst); });
}
void ProfilingBackend::CopyFromHostAsync(const void* src, const Tensor& dst) {
  Time("CopyFromHost", 0, [&] { inner_->CopyFromHostAsync(src, dst); });
}
void ProfilingBackend::CopyToHostF32Async(const Tensor& src, float* dst) {
  Time("CopyToHostF32", 0, [&] { inner_->CopyToHostF32Async(src, dst); });
}
void ProfilingBackend::Linear(const LinearParams& p) {
  const double flops = 2.0 * p.x.rows * p.weight->in_features * p.weight->out_features;
  // One row per weight shape (QKV, o-proj, MLP in, MLP out, ...).
  const std::string name = "Linear " + std::to_string(p.weight->out_features) + "x" +
                           std::to_string(p.weight->in_features) + " " +
                           DTypeName(p.weight->dtype) + " (out " + DTypeName(p.out.dtype) + ")";
  Time(name.c_str(), flops, [&] { inner_->Linear(p); });
}
void ProfilingBackend::EmbeddingGather(const Tensor& table, const int32_t* ids, int64_t n,
                                       Tensor out, bool accumulate) {
  Time("EmbeddingGather", 0, [&] { inner_->EmbeddingGather(table, ids, n, out, accumulate); });
}
void ProfilingBackend::LayerNorm(const Tensor& x, const Tensor* residual, const Tensor& gamma,
                                 const Tensor* beta, float eps, Tensor out) {
  Time("LayerNorm", 0, [&] { inner_->LayerNorm(x, residual, gamma, beta, eps, out); });
}
void ProfilingBackend::RmsNorm(Tensor residual, const Tensor* delta, const Tensor& weight,
                               float eps, Tensor out, int group) {
  Time(group > 0 ? "RmsNorm (per head)" : "RmsNorm", 0,
       [&] { inner_->RmsNorm(residual, delta, weight, eps, out, group); });
}
void ProfilingBackend::Rope(const RopeParams& p) {
  Time("Rope", 0, [&] { inner_->Rope(p); });
}
void ProfilingBackend::QkNormRope(const RopeParams& p, const Tensor& norm_weight, float eps) {
  Time("QkNormRope", 0, [&] { inner_->QkNormRope(p, norm_weight, eps); });
}
void ProfilingBackend::Attention(const AttentionParams& p) {
  // Useful FLOPs from the sequence lengths need host cu_seqlens; approximate with
  // max_seqlen when only device offsets exist.
  double flops = 0;
  if (kind() == DeviceKind::kCpu) {
    for (int s = 0; s < p.num_seqs; ++s) {
      const double len = p.cu_seqlens[s + 1] - p.cu_seqlens[s];
      const double keys = len + (p.paged() ? p.kv_start[s] : 0);
      flops += 4.0 * len * keys * p.head_dim * p.num_heads * (p.causal ? 0.5 : 1.0);
    }
  }
  // Windowed (local) and global layers apart: their costs differ (ModernBERT alternates).
  std::string name = p.paged() ? "Attention (paged KV)" : "Attention";
  if (p.window > 0) name += " (window " + std::to_string(p.window) + ")";
  Time(name.c_str(), flops, [&] { inner_->Attention(p); });
}
void ProfilingBackend::WriteKv(const KvWriteParams& p) {
  Time("WriteKv", 0, [&] { inner_->WriteKv(p); });
}
void ProfilingBackend::CopyKvBlocks(const KvCopyParams& p) {
  Time("CopyKvBlocks", 0, [&] { inner_->CopyKvBlocks(p); });
}
void ProfilingBackend::Sample(const SampleParams& p) {
  Time("Sample", 0, [&] { inner_->Sample(p); });
}
void ProfilingBackend::Activate(Tensor x, Activation act) {
  Time("Activate", 0, [&] { inner_->Activate(x, act); });
}
void ProfilingBackend::GatedActivate(const Tensor& gate_up, Activation act, Tensor out) {
  Time("GatedActivate", 0, [&] { inner_->GatedActivate(gate_up, act, out); });
}
void ProfilingBackend::Add(const Tensor& a, const Tensor& b, Tensor out) {
  Time("Add", 0, [&] { inner_->Add(a, b, out); });
}
void ProfilingBackend::GatherRows(const Tensor& x, const int32_t* rows, int64_t n, Tensor out) {
  Time("GatherRows", 0, [&] { inner_->GatherRows(x, rows, n, out); });
}
void ProfilingBackend::Pool(const PoolParams& p) {
  Time("Pool", 0, [&] { inner_->Pool(p); });
}

}  // namespace sluice
