// cuBLASLt GEMM plans of the CUDA backend: descriptor, layouts and algorithm per exact
// GEMM, cached. GEMMs of M >= kTuneMinM rows time cuBLASLt's candidate algorithms once per
// power-of-two class of M on the call's own operands and keep the fastest; smaller ones take
// the heuristic's first choice per M bucket, or with small_tune (SLUICE_CUDA_GEMM_SMALL=tune)
// the fastest of the heuristic's candidates per M bucket, split-K ones included (a fixed
// split of K, so a row's sum runs in the same order in every batch of the bucket). Split-K
// is otherwise avoided, and every batch of a class (bucket) computes its rows with one
// algorithm.
// Batch invariant (BackendOptions::batch_invariant): one algorithm per GEMM whatever M (the
// heuristic's first choice without split-K or another reduction scheme at kInvariantM
// rows), so a row's result never depends on the rows around it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_util.h"

namespace sluice::cuda {

// Column-major view: D[N, M] = op(A)[N, K] · B[K, M] with A = W (stored [N, K] row-major)
// and B = X^T (ld = x stride); dtype = the weights' (and B's), odt = C/D's.
struct GemmKey {
  int64_t m, n, k, ldb, ldc, ldd;
  int dtype, odt, epilogue, beta, al_a, al_b, al_c, al_d;
  int bias_dt = static_cast<int>(DType::kF32);  // the epilogue bias's dtype
  auto Tie() const {
    return std::tie(m, n, k, ldb, ldc, ldd, dtype, odt, epilogue, beta, al_a, al_b, al_c, al_d,
                    bias_dt);
  }
  bool operator<(const GemmKey& o) const { return Tie() < o.Tie(); }
};

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
};

// The operands of the GEMM a plan is made for, so candidate algorithms can be timed on
// them (d may be replaced by scratch when it aliases c).
struct GemmOperands {
  const void* a;
  const void* b;
  const void* c;
  void* d;
  float beta;
};

class GemmPlanner {
 public:
  static constexpr size_t kWorkspaceBytes = 32u << 20;  // cuBLASLt workspace per GEMM
  // `workspace` (kWorkspaceBytes, device) and the handle/stream stay owned by the caller.
  GemmPlanner(cublasLtHandle_t lt, cudaStream_t stream, bool tf32, void* workspace,
              bool batch_invariant = false, bool small_tune = false)
      : lt_(lt),
        stream_(stream),
        tf32_(tf32),
        invariant_(batch_invariant),
        small_tune_(small_tune && !batch_invariant),
        ws_(workspace) {
    const char* log = std::getenv("SLUICE_CUDA_GEMM_LOG");
    log_ = log != nullptr && log[0] == '1';
  }
  ~GemmPlanner();
  GemmPlanner(const GemmPlanner&) = delete;
  GemmPlanner& operator=(const GemmPlanner&) = delete;

  // The plan of one exact GEMM (plan->ok false: no algorithm, e.g. for that epilogue).
  // may_time: false while the stream is being captured; a plan that would need timing then
  // aborts (timing synchronises; the engine's eager warm-up prepares every plan first).
  const GemmPlan* Plan(const GemmKey& key, const void* bias, const GemmOperands& ops,
                       bool may_time);
  // Batch-invariant GEMMs whose one algorithm did not fit an exact shape (a warning is
  // logged once; tests expect 0).
  int invariance_misses() const { return invariance_misses_; }

 private:
  static constexpr int64_t kTuneMinM = 1024;
  static constexpr int64_t kInvariantM = 1024;
  static constexpr size_t kMaxPlans = 4096;
  // Rows M of a GEMM -> the M whose heuristic algorithm it uses (M < kTuneMinM).
  static int64_t BucketM(int64_t m);
  static int64_t TuneClassM(int64_t m);
  void CreatePlan(const GemmKey& key, const void* bias, GemmPlan& p);
  static void DestroyPlan(GemmPlan& p);
  // with_splitk: split-K candidates next to the others (else only when nothing else is).
  std::vector<cublasLtMatmulAlgo_t> Candidates(const GemmKey& key, const GemmPlan& p,
                                               bool with_splitk = false);
  void Heuristic(const GemmKey& key, GemmPlan& p);
  const std::pair<cublasLtMatmulAlgo_t, bool>& SharedAlgo(const GemmKey& key, const void* bias);
  void Tune(const GemmKey& key, GemmPlan& p, const GemmOperands& ops, bool may_time,
            bool with_splitk);
  // The tuned algorithm of the class `ck` (`key` with M set to its class) for the exact GEMM
  // `key` (plan p), timed on the first exact GEMM of the class that needs it.
  const GemmPlan* Tuned(const GemmKey& key, const GemmKey& ck, GemmPlan& p, const GemmOperands& ops,
                        bool may_time, bool with_splitk);

  cublasLtHandle_t lt_;
  cudaStream_t stream_;
  bool tf32_;
  bool invariant_;
  bool small_tune_;
  bool log_ = false;  // SLUICE_CUDA_GEMM_LOG=1: each timed choice on stderr
  int invariance_misses_ = 0;
  void* ws_;
  std::map<GemmKey, GemmPlan> plans_;
  std::map<GemmKey, std::pair<cublasLtMatmulAlgo_t, bool>> bucket_algos_;
  std::map<GemmKey, cublasLtMatmulAlgo_t> tuned_;  // per class of M (TuneClassM)
  Scratch tune_ws_;
  cudaEvent_t tune_start_ = nullptr, tune_stop_ = nullptr;
};

}  // namespace sluice::cuda
