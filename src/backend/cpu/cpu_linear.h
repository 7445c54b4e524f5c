// Linear layers on oneDNN matmul, or on sluice's own GEMM (gemm.h) where oneDNN has no
// batch-invariant kernel (AVX2 machines: oneDNN 2.6's brgemm needs AVX-512). The path is
// chosen per compute dtype at Prepare; SLUICE_CPU_LINEAR=onednn|sluice|avx512bf16|avx512fma|amx
// forces one (amx: sluice's AMX GEMM for bf16 and int8, gemm_x86.h; refused without AMX).
//
// Weights ([N, K], torch layout) are converted to the compute dtype (f32 or bf16) and
// prepacked once into the blocked layout that oneDNN's brgemm matmul prefers.
//
// M (tokens) varies per batch. oneDNN 2.6 only gives a blocked-weight (brgemm) kernel
// for a fixed M (runtime M falls back to gemm:jit with plain weights, which is ~10%
// slower and NOT batch invariant: a row's result changes with M). So primitives are
// created per M *bucket* and cached; a batch runs as a few bucket-sized calls, with the
// tail rows copied into a zero-padded workspace. The brgemm kernel's K-reduction order
// does not depend on M, so a row's output is bit-identical whatever batch it is in
// (tested in tests/unit/backend/linear_test.cc).
//
// bf16: activations are rounded (RNE) to bf16 into a workspace; accumulation and output
// are f32. Bias, activation (post-op eltwise) and residual (sum post-op, out pre-filled
// with the residual) are fused into the matmul.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/workspace.h"

namespace sluice::cpu {

// Owns the oneDNN engine/stream and the Linear workspaces. Used by one thread at a time.
class LinearRunner {
 public:
  LinearRunner();
  ~LinearRunner();
  LinearRunner(const LinearRunner&) = delete;
  LinearRunner& operator=(const LinearRunner&) = delete;

  StatusOr<std::unique_ptr<LinearWeight>> Prepare(const HostTensor& weight, const HostTensor* bias,
                                                  DType dtype);
  // out must not alias x. If residual is set and differs from out, it is copied into out
  // first. x and out may be strided.
  void Run(const LinearParams& p);

  // oneDNN's effective ISA, e.g. "avx512_bf16" or "amx".
  static std::string IsaName();
  // Which GEMM runs per compute dtype, e.g. "f32 oneDNN-brgemm(amx), bf16 sluice-gemm".
  static std::string Describe();
  // "auto" (default: see ChoosePath in cpu_linear.cc), "onednn", "sluice", "avx512bf16",
  // "avx512fma" or "amx"; overrides SLUICE_CPU_LINEAR for weights prepared afterwards.
  // Tests and benchmarks only.
  static void SetPathForTesting(const std::string& mode);
  // BackendOptions::cpu_few_rows: bf16 and int8 weights prepared afterwards prefer the
  // AVX-512 kernels over the AMX ones (sluice's, or oneDNN's where sluice's AMX is not
  // usable) on AMX machines (SLUICE_CPU_LINEAR still decides when set).
  void SetFewRows(bool few) { few_rows_ = few; }

  // The weights prepared so far by kernel, e.g. "int8 sluice-int8(avx512_vnni) x36, f32
  // oneDNN-brgemm(avx512_core) x1": what a model's linear layers really run on.
  std::string DescribePrepared() const;

  // oneDNN matmul primitives created so far (process-wide) and the time that took.
  struct CacheStats {
    int64_t created = 0;  // misses: primitive descriptor + primitive created
    int64_t hits = 0;     // lookups served without creating anything
    double pd_ms = 0;     // creating primitive descriptors
    double prim_ms = 0;   // creating primitives (oneDNN's JIT, or its primitive cache)
  };
  static CacheStats GetCacheStats();

  // Rows per primitive call used for a given M (exposed for tests/benchmarks).
  static int64_t BucketFor(int64_t m);
  // The primitive calls used for M rows, e.g. "256 + 44 (padded to 48)".
  static std::string DescribePlan(int64_t m);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool few_rows_ = false;
};

}  // namespace sluice::cpu
