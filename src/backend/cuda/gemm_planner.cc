// cuBLASLt GEMM plans of the CUDA backend (see gemm_planner.h).
#include "backend/cuda/gemm_planner.h"

#include <cstdio>

namespace sluice::cuda {

GemmPlanner::~GemmPlanner() {
  for (auto& [key, plan] : plans_) DestroyPlan(plan);
  if (tune_start_) cudaEventDestroy(tune_start_);
  if (tune_stop_) cudaEventDestroy(tune_stop_);
}

// Rows M of a GEMM -> the M whose algorithm it uses: batches of similar size share one
// cuBLASLt heuristic query (and one algorithm, so their rows are computed alike).
int64_t GemmPlanner::BucketM(int64_t m) {
  if (m <= 256) {
    int64_t b = 1;
    while (b < m) b <<= 1;
    return b;
  }
  if (m <= 8192) return (m + 255) / 256 * 256;
  return (m + 2047) / 2048 * 2048;
}

// Column-major view: D[N, M] = op(A)[N, K] · B[K, M] with A = W (stored [N, K] row-major,
// i.e. K x N column-major, transposed) and B = X^T (K x M column-major, ld = x stride).
void GemmPlanner::CreatePlan(const GemmKey& key, const void* bias, GemmPlan& p) {
  const DType wdt = static_cast<DType>(key.dtype);
  const cublasComputeType_t compute =
      wdt == DType::kF32 && tf32_ ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  BLAS_OK(cublasLtMatmulDescCreate(&p.desc, compute, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  BLAS_OK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  BLAS_OK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const auto epi = static_cast<cublasLtEpilogue_t>(key.epilogue);
  BLAS_OK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
  if (bias) {
    BLAS_OK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                           sizeof(bias)));
    const cudaDataType_t bias_type = CudaType(static_cast<DType>(key.bias_dt));
    BLAS_OK(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                           sizeof(bias_type)));
  }
  BLAS_OK(cublasLtMatrixLayoutCreate(&p.a, CudaType(wdt), key.k, key.n, key.k));
  BLAS_OK(cublasLtMatrixLayoutCreate(&p.b, CudaType(wdt), key.k, key.m, key.ldb));
  const DType odt = static_cast<DType>(key.odt);
  BLAS_OK(cublasLtMatrixLayoutCreate(&p.c, CudaType(odt), key.n, key.m, key.ldc));
  BLAS_OK(cublasLtMatrixLayoutCreate(&p.d, CudaType(odt), key.n, key.m, key.ldd));
}

void GemmPlanner::DestroyPlan(GemmPlan& p) {
  if (p.desc) cublasLtMatmulDescDestroy(p.desc);
  for (auto* l : {p.a, p.b, p.c, p.d}) {
    if (l) cublasLtMatrixLayoutDestroy(l);
  }
  p = GemmPlan{};
}

// cuBLASLt's heuristic candidates for a plan's shape (best first): without split-K unless
// with_splitk or nothing else is offered.
std::vector<cublasLtMatmulAlgo_t> GemmPlanner::Candidates(const GemmKey& key, const GemmPlan& p,
                                                          bool with_splitk) {
  cublasLtMatmulPreference_t pref;
  BLAS_OK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  BLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                               sizeof(ws)));
  const uint32_t al[4] = {static_cast<uint32_t>(key.al_a), static_cast<uint32_t>(key.al_b),
                          static_cast<uint32_t>(key.al_c), static_cast<uint32_t>(key.al_d)};
  BLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                               &al[0], sizeof(uint32_t)));
  BLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                               &al[1], sizeof(uint32_t)));
  BLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                               &al[2], sizeof(uint32_t)));
  BLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                               &al[3], sizeof(uint32_t)));
  if (invariant_) {  // no split-K reductions of any scheme: K summed in one pass, in order
    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    BLAS_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                 &none, sizeof(none)));
  }
  constexpr int kMaxWant = 16;
  const int want = with_splitk ? kMaxWant : 8;
  cublasLtMatmulHeuristicResult_t res[kMaxWant];
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.d, pref, want, res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> out, splitk;
  if (st != CUBLAS_STATUS_SUCCESS) return out;
  for (int i = 0; i < found; ++i) {
    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
    int32_t n = 1;
    size_t written = 0;
    const bool no_splitk =
        cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &n,
                                             sizeof(n), &written) == CUBLAS_STATUS_SUCCESS &&
        n <= 1;
    (no_splitk ? out : splitk).push_back(res[i].algo);
  }
  if (with_splitk) {
    out.insert(out.end(), splitk.begin(), splitk.end());
  } else if (out.empty() && !splitk.empty()) {
    out.push_back(splitk[0]);
  }
  return out;
}

// The heuristic's first choice for a plan's shape. Sets p.algo / p.ok.
void GemmPlanner::Heuristic(const GemmKey& key, GemmPlan& p) {
  const auto c = Candidates(key, p);
  p.ok = !c.empty();
  if (p.ok) p.algo = c[0];
}

// Times the heuristic's candidates on the call's own operands and sets the fastest
// (SLUICE_CUDA_GEMM_LOG=1 prints each choice). The heuristic's first choice is
// up to ~10% slower than the best at the model's shapes on an H200.
void GemmPlanner::Tune(const GemmKey& key, GemmPlan& p, const GemmOperands& ops, bool may_time,
                       bool with_splitk) {
  const auto cand = Candidates(key, p, with_splitk);
  p.ok = !cand.empty();
  if (!p.ok) return;
  p.algo = cand[0];
  if (cand.size() == 1) return;
  // Timing synchronises: never while recording (the engine's eager warm-up run of each
  // bucket prepares its plans first).
  if (!may_time) {
    std::fprintf(stderr, "sluice cuda: GEMM algorithm timing needed while recording a forward\n");
    std::abort();
  }
  // With beta = 1 and d == c (a residual accumulated in place) the timing runs must not
  // touch the real output: they write scratch (same size and dtype).
  void* d = ops.d;
  const void* c = ops.c;
  if (ops.beta != 0.f && ops.c == ops.d) {
    d = tune_ws_.Get(static_cast<size_t>(key.ldd * key.m) * DTypeSize(static_cast<DType>(key.odt)),
                     false);
    c = d;
  }
  if (!tune_start_) {
    CUDA_OK(cudaEventCreate(&tune_start_));
    CUDA_OK(cudaEventCreate(&tune_stop_));
  }
  const float alpha = 1.f;
  // Each candidate: one warm-up launch, then kReps launches queued behind it between two
  // events (the GPU stays busy, so the events time the kernels, not the launch latency of
  // a lone small GEMM); twice, the faster pass counts.
  constexpr int kReps = 8;
  float best = 0.f, first = 0.f;
  int best_i = -1, i = -1;
  for (const auto& algo : cand) {
    ++i;
    cublasLtMatmulHeuristicResult_t chk{};
    if (cublasLtMatmulAlgoCheck(lt_, p.desc, p.a, p.b, p.c, p.d, &algo, &chk) !=
            CUBLAS_STATUS_SUCCESS ||
        chk.state != CUBLAS_STATUS_SUCCESS || chk.workspaceSize > kWorkspaceBytes) {
      continue;
    }
    const auto run = [&] {
      BLAS_OK(cublasLtMatmul(lt_, p.desc, &alpha, ops.a, p.a, ops.b, p.b, &ops.beta, c, p.c, d, p.d,
                             &algo, ws_, kWorkspaceBytes, stream_));
    };
    float t = 0.f;
    for (int pass = 0; pass < 2; ++pass) {
      run();
      CUDA_OK(cudaEventRecord(tune_start_, stream_));
      for (int rep = 0; rep < kReps; ++rep) run();
      CUDA_OK(cudaEventRecord(tune_stop_, stream_));
      CUDA_OK(cudaEventSynchronize(tune_stop_));
      float ms = 0.f;
      CUDA_OK(cudaEventElapsedTime(&ms, tune_start_, tune_stop_));
      ms /= kReps;
      if (pass == 0 || ms < t) t = ms;
    }
    if (i == 0) first = t;
    if (best == 0.f || t < best) {
      best = t;
      best_i = i;
      p.algo = algo;
    }
  }
  if (log_) {
    int32_t splitk = 1, tile = 0, id = 0;
    size_t w = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk,
                                         sizeof(splitk), &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                         &w);
    cublasLtMatmulAlgoConfigGetAttribute(&p.algo, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof(id), &w);
    std::fprintf(
        stderr,
        "sluice cuda: GEMM %lld x %lld x %lld (dtype %d): %zu candidates%s, first %.1f us, "
        "best #%d %.1f us (algo %d, tile %d, split-K %d)\n",
        static_cast<long long>(key.m), static_cast<long long>(key.n), static_cast<long long>(key.k),
        key.dtype, cand.size(), with_splitk ? " (split-K included)" : "", first * 1e3, best_i,
        best * 1e3, id, tile, splitk);
  }
  tune_ws_ = Scratch();  // not kept: it can be as large as the output
}

// The timed algorithm of class `ck` for the exact GEMM `key`: the class's, when it fits
// the exact shape, else timed now on this GEMM's operands (and kept for the class when it
// had none).
const GemmPlan* GemmPlanner::Tuned(const GemmKey& key, const GemmKey& ck, GemmPlan& p,
                                   const GemmOperands& ops, bool may_time, bool with_splitk) {
  auto tit = tuned_.find(ck);
  if (tit != tuned_.end()) {
    cublasLtMatmulHeuristicResult_t chk{};
    if (cublasLtMatmulAlgoCheck(lt_, p.desc, p.a, p.b, p.c, p.d, &tit->second, &chk) ==
            CUBLAS_STATUS_SUCCESS &&
        chk.state == CUBLAS_STATUS_SUCCESS && chk.workspaceSize <= kWorkspaceBytes) {
      p.algo = tit->second;
      p.ok = true;
      return &p;
    }
  }
  Tune(key, p, ops, may_time, with_splitk);
  if (p.ok && tit == tuned_.end()) tuned_.emplace(ck, p.algo);
  return &p;
}

// GEMMs of at least kTuneMinM rows have their algorithm chosen by timing (once per
// power-of-two class of M: the offline engine's warm-up forward tunes its batch size).
int64_t GemmPlanner::TuneClassM(int64_t m) {
  int64_t b = 1;
  while (b < m) b <<= 1;
  return b;
}

// The heuristic's algorithm for a representative shape (an M bucket, or kInvariantM),
// queried once and shared by every exact shape that maps to it; second: found.
const std::pair<cublasLtMatmulAlgo_t, bool>& GemmPlanner::SharedAlgo(const GemmKey& key,
                                                                     const void* bias) {
  auto it = bucket_algos_.find(key);
  if (it == bucket_algos_.end()) {
    GemmPlan tmp;
    CreatePlan(key, bias, tmp);
    Heuristic(key, tmp);
    it = bucket_algos_.emplace(key, std::make_pair(tmp.algo, tmp.ok)).first;
    DestroyPlan(tmp);
  }
  return it->second;
}

// The plan (descriptor, layouts, algorithm) of one exact GEMM. Large GEMMs (M >=
// kTuneMinM) use the algorithm timed fastest for their class of M; smaller ones the
// heuristic's choice for their M bucket. Either is checked against the exact shape with
// cublasLtMatmulAlgoCheck, so a new batch size costs no heuristic query or timing, and
// every batch of a class (bucket) computes its rows with the same algorithm. The cache of
// exact plans is bounded (cleared past kMaxPlans; class and bucket algorithms are kept).
const GemmPlan* GemmPlanner::Plan(const GemmKey& key, const void* bias, const GemmOperands& ops,
                                  bool may_time) {
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  if (plans_.size() >= kMaxPlans) {
    for (auto& [k, plan] : plans_) DestroyPlan(plan);
    plans_.clear();
  }
  GemmPlan& p = plans_[key];
  CreatePlan(key, bias, p);
  const auto fits = [&](const cublasLtMatmulAlgo_t& algo) {
    cublasLtMatmulHeuristicResult_t chk{};
    return cublasLtMatmulAlgoCheck(lt_, p.desc, p.a, p.b, p.c, p.d, &algo, &chk) ==
               CUBLAS_STATUS_SUCCESS &&
           chk.state == CUBLAS_STATUS_SUCCESS && chk.workspaceSize <= kWorkspaceBytes;
  };
  if (invariant_) {
    GemmKey ik = key;
    ik.m = kInvariantM;
    const auto& algo = SharedAlgo(ik, bias);
    if (algo.second && fits(algo.first)) {
      p.algo = algo.first;
      p.ok = true;
      return &p;
    }
    if (invariance_misses_++ == 0) {
      std::fprintf(stderr,
                   "sluice cuda: warning: batch invariance not kept for a %lld x %lld x %lld GEMM "
                   "(its algorithm does not fit %lld rows)\n",
                   static_cast<long long>(key.m), static_cast<long long>(key.n),
                   static_cast<long long>(key.k), static_cast<long long>(key.m));
    }
    Heuristic(key, p);
    return &p;
  }
  if (key.m >= kTuneMinM) {
    GemmKey ck = key;
    ck.m = TuneClassM(key.m);
    return Tuned(key, ck, p, ops, may_time, false);
  }
  GemmKey bk = key;
  bk.m = BucketM(key.m);
  if (small_tune_) {
    bk.m = -bk.m;  // classes of their own, apart from the large GEMMs' (split-K timed too)
    return Tuned(key, bk, p, ops, may_time, true);
  }
  const auto& algo = SharedAlgo(bk, bias);
  if (algo.second && fits(algo.first)) {
    p.algo = algo.first;
    p.ok = true;
    return &p;
  }
  Heuristic(key, p);  // the bucket's algorithm does not fit this exact shape
  return &p;
}

}  // namespace sluice::cuda
